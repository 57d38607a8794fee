"""The operator CLI (docs/spec/architecture.md#ar-operating): ``db upgrade`` and ``token create`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import sqlalchemy as sa


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "host_cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_token_create_prints_the_token_alone_and_it_authenticates(db_url, client):
    space = f"cli{uuid.uuid4().hex[:8]}"
    result = _cli("token", "create", "--space", space)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tko_")
    response = client.get(f"/v2/spaces/{space}/resources", headers={"Authorization": f"Bearer {lines[0]}"})
    assert response.status_code == 200, response.get_json()


def test_token_create_rejects_a_bad_space_name_without_traceback(db_url):
    result = _cli("token", "create", "--space", "Bad Space!")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "invalid_request" in result.stderr


def test_db_upgrade_on_a_new_database(db_url):
    from tests.conftest import ADMIN_URL

    name = f"takohost_cli_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        result = _cli("db", "upgrade", env={"TAKOHOST_DATABASE_URL": url})
        assert result.returncode == 0, result.stderr
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        engine.dispose()
        assert {"resources", "operations", "instances", "steps", "cron_matches"} <= tables
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_a_supervised_solo_process_refuses_a_concurrency_it_cannot_give():
    """``--pool solo --concurrency N`` is N supervised processes (host_cli.worker_pool); one
    supervised process runs one task at a time."""
    result = _cli("worker", "--pool", "solo", "--supervised", "--concurrency", "2")
    assert result.returncode == 2
    assert "a supervised solo process runs one task at a time" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------
# takohost dev (docs/spec/host-features.md#hf-one-stack): start failures are reported, and no server outlives it


def _dev(data_dir, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOHOST_")}
    return subprocess.Popen([sys.executable, "-m", "host_cli", "dev", "--port", str(port), "--data-dir",
                             str(data_dir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


def _wait_running(proc: subprocess.Popen, timeout: float = 240) -> str:
    import select
    import time

    out = ""
    deadline = time.monotonic() + timeout
    while "Press Ctrl-C" not in out:
        assert proc.poll() is None, out + proc.stderr.read()
        assert time.monotonic() < deadline, out
        ready, _, _ = select.select([proc.stdout], [], [], 1)
        if ready:  # raw reads: a buffered readline would hide the rest of the banner from select
            out += os.read(proc.stdout.fileno(), 65536).decode()
    return out


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _gone(pids: set[int], timeout: float = 60) -> set[int]:
    import time

    from core import processes

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if processes.running(pid)}
        if not left:
            return set()
        time.sleep(0.2)
    return left


def test_dev_refuses_a_taken_port_and_exits_non_zero(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _dev(tmp_path / "data", port)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert f"port {port} is already in use" in err
    assert "running" not in out and "Traceback" not in err


def test_dev_refuses_a_sqlite_era_data_dir_with_a_message(tmp_path):
    from tests.support import processes

    data = tmp_path / "data"
    data.mkdir()
    (data / "takohost.db").write_bytes(b"SQLite format 3\x00")
    proc = _dev(data, processes.free_port())
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    assert "older takohost dev" in err and f"mv {data}" in err
    assert "Traceback" not in err


def test_dev_stops_a_leftover_and_leaves_no_orphan_after_sigkill_or_sigterm(tmp_path):
    import signal

    from host_cli import embedded
    from tests.support import processes

    data = tmp_path / "d"
    port = processes.free_port()
    # A server left behind by a crashed supervisor: the cluster's postmaster.pid names it.
    leftover = embedded.EmbeddedPostgres(root=data / "postgres", log_path=tmp_path / "leftover.log",
                                         port=processes.free_port())
    data.mkdir(mode=0o700)
    leftover.start()
    assert leftover.proc.poll() is None

    dev = _dev(data, port)
    try:
        printed = _wait_running(dev)
        assert f"http://127.0.0.1:{port}" in printed
        assert leftover.proc.wait(30) is not None, "the leftover postgres was stopped"
        tree = _descendants(dev.pid)
        servers = {int((data / "postgres" / "data" / "postmaster.pid").read_text().split()[0]),
                   int((data / "redis" / "redis.pid").read_text().split()[0])}
        assert servers <= tree
        os.kill(dev.pid, signal.SIGKILL)  # a crash of the supervisor
        dev.wait(10)
        assert _gone(tree) == set(), "processes outlived a SIGKILLed takohost dev"
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)

    dev = _dev(data, port)  # starts again on the same data dir after the crash
    try:
        _wait_running(dev)
        tree = _descendants(dev.pid)
        os.kill(dev.pid, signal.SIGTERM)
        assert dev.wait(60) == 0
        assert "takohost dev stopped" in os.read(dev.stdout.fileno(), 65536).decode()
        assert _gone(tree, timeout=5) == set(), "processes outlived a stopped takohost dev"
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
