"""A newcomer follows the README (docs/spec/host-features.md#hf-one-command; docs/spec/host-features.md#hf-one-stack): on a copy of the
repository, in a fresh virtualenv, with no Postgres or Redis configured (no server URL in the
environment), the README's first command installs and starts ``takohost dev`` on its embedded
PostgreSQL and Redis; the five-minute tour runs an order to ``complete``; the other examples
deploy and run; a sleeping instance started before a Ctrl-C wakes after a restart; and the
README's second command, on a representative slice of the suite (``tests/unit`` and one
integration file), passes on the embedded servers it starts itself.

This test deliberately runs the README's own text: if the README drifts, it fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time

import pytest
import requests

from tests.support import processes

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _sh_blocks(readme: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", readme, flags=re.S)


def _commands(block: str) -> list[str]:
    """Shell commands of a README block (joins ``\\`` continuations, drops comments)."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def _newcomer_env(tmp: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAKOHOST_", "VIRTUAL_ENV", "PYTHON"))}
    env["HOME"] = str(tmp / "home")
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if "/.venv/" not in p)
    # Reuse this machine's wheel cache (the newcomer's HOME is empty): installs stay fast.
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(pathlib.Path.home() / ".cache" / "pip")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _copy_repo(target: pathlib.Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in files:
        source = REPO / name
        if source.is_file() and not name.startswith(".venv/"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _start_dev(command: str, *, cwd: pathlib.Path, env: dict[str, str], port: int, log: pathlib.Path):
    proc = subprocess.Popen(["bash", "-c", f"{command} --port {port}"], cwd=cwd, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200 \
                    and "Token:" in log.read_text():
                return proc
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise TimeoutError(log.read_text())


def _stop_dev(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a user would, and require a clean exit."""
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(60) == 0


def _run(cmd: str, *, cwd: pathlib.Path, env: dict[str, str], timeout: float = 240) -> str:
    result = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_readme_first_command_tour_examples_and_restart(tmp_path: pathlib.Path) -> None:
    repo = tmp_path / "takohost"
    _copy_repo(repo)
    (tmp_path / "home").mkdir()
    env = _newcomer_env(tmp_path)
    readme = (repo / "README.md").read_text(encoding="utf-8")
    blocks = _sh_blocks(readme)
    first_command = _commands(blocks[0])[0]
    assert first_command.endswith("takohost dev"), first_command
    port = processes.free_port()
    log = tmp_path / "dev.log"
    dev = _start_dev(first_command, cwd=repo, env=env, port=port, log=log)
    try:
        printed = log.read_text()
        assert f"http://127.0.0.1:{port}" in printed and "Space:  dev" in printed
        token = re.search(r"Token:\s+(\S+)", printed).group(1)
        assert (repo / ".takohost" / "token").read_text().strip() == token

        tour = next(b for b in blocks if "takohost deploy examples/orders" in b)
        for cmd in _commands(tour):
            cmd = cmd.replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
            if cmd.startswith("export "):
                for name, value in re.findall(r"(\w+)=(\$\(cat [^)]*\)|\S+)", cmd[len("export "):]):
                    env[name] = (repo / ".takohost" / "token").read_text().strip() \
                        if value.startswith("$(") else value
                continue
            if "instances status" in cmd:  # the tour's comment says it is waiting for "shipped"
                deadline = time.monotonic() + 60
                while "waiting" not in _run(cmd, cwd=repo, env=env):
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
                continue
            _run(cmd, cwd=repo, env=env)
        cli = ".venv/bin/takohost"
        final = json.loads(_run(f"{cli} instances status order-fulfilment A-1001 --json", cwd=repo, env=env))
        assert final["status"] == "complete"
        assert final["output"]["trackingNumber"] == "00340434161094042557"

        # The approvals example: a human decision.
        _run(f"{cli} deploy examples/approvals", cwd=repo, env=env)
        _run(f"{cli} instances create approval-request --id CR-1 --params '{{\"title\": \"Ship it\"}}'",
             cwd=repo, env=env)
        deadline = time.monotonic() + 60
        while json.loads(_run(f"{cli} instances status approval-request CR-1 --json", cwd=repo,
                              env=env))["status"] != "waiting":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        _run(f"{cli} instances send-event approval-request CR-1 decision "
             f"--payload '{{\"approved\": false, \"by\": \"alan\"}}'", cwd=repo, env=env)
        final = json.loads(_run(f"{cli} status approval-request CR-1 --watch --timeout 90 --json",
                                cwd=repo, env=env))
        assert final["status"] == "complete" and final["output"]["status"] == "rejected"

        # The nightly-report example, every minute instead of 02:00 UTC: its ``scheduled`` handler
        # starts a report instance through its binding, which runs to complete.
        nightly = tmp_path / "nightly-report"
        shutil.copytree(repo / "examples" / "nightly-report", nightly)
        toml = (nightly / "takohost.toml").read_text()
        assert 'cron = "0 2 * * *"' in toml
        (nightly / "takohost.toml").write_text(toml.replace('cron = "0 2 * * *"', 'cron = "* * * * *"'))
        _run(f"{cli} deploy {nightly}", cwd=repo, env=env)
        deadline = time.monotonic() + 150
        while not (listed := json.loads(_run(f"{cli} instances list daily-report --json", cwd=repo,
                                             env=env))["instances"]):
            assert time.monotonic() < deadline, "the cron trigger started no instance"
            time.sleep(2)
        report = json.loads(_run(f"{cli} status daily-report {listed[0]['id']} --watch --timeout 90 --json",
                                 cwd=repo, env=env))
        assert report["status"] == "complete", report

        # A sleeping instance survives Ctrl-C and a restart.
        nap = tmp_path / "nap"
        nap.mkdir()
        (nap / "main.py").write_text(textwrap.dedent("""
            class Nap:
                def __init__(self, env):
                    self.env = env

                def run(self, event, step):
                    step.sleep("nap", 6)
                    return {"woke": True}
        """))
        (nap / "takohost.toml").write_text(textwrap.dedent("""
            [worker]
            name = "napper"

            [[workflows]]
            name = "nap"
            class = "Nap"
        """))
        _run(f"{cli} deploy {nap}", cwd=repo, env=env)
        _run(f"{cli} instances create nap --id n1", cwd=repo, env=env)
        deadline = time.monotonic() + 60
        while json.loads(_run(f"{cli} instances status nap n1 --json", cwd=repo, env=env))["status"] != "sleeping":
            assert time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        _stop_dev(dev)
    dev = _start_dev(first_command, cwd=repo, env=env, port=port, log=log)
    try:
        assert re.findall(r"Token:\s+(\S+)", log.read_text())[-1] == token, "the token survives a restart"
        final = json.loads(_run(f"{cli} status nap n1 --watch --timeout 120 --json", cwd=repo, env=env))
        assert final == {"id": "n1", "status": "complete", "output": {"woke": True}} or (
            final["status"] == "complete" and final["output"] == {"woke": True})
        assert json.loads(_run(f"{cli} instances status order-fulfilment A-1001 --json", cwd=repo,
                               env=env))["status"] == "complete", "state survives a restart"
    finally:
        _stop_dev(dev)
    assert not _embedded_servers(str(repo)), "Ctrl-C stopped the embedded servers"

    # The README's second command, on a slice of the suite: ``tests/unit`` (which once stopped on
    # a file outside the repository) and one integration file (HTTP, Postgres, Redis, cases.json).
    second = _commands(blocks[1])[0]
    assert second.endswith(".venv/bin/pytest"), second
    assert not any(name.startswith("TAKOHOST_") for name in env if name not in ("TAKOHOST_URL", "TAKOHOST_TOKEN"))
    inner_env = {k: v for k, v in env.items() if not k.startswith(("TAKOHOST_", "PYTEST_"))}
    inner_env["PYTEST_DEBUG_TEMPROOT"] = str(tmp_path / "inner-tmp")  # not this run's basetemp
    (tmp_path / "inner-tmp").mkdir()
    # The inner run's temporary directory is its own (short: a Unix socket path lives below it),
    # so counting the servers below it counts the inner run's only, never another run's.
    inner_tmp = tempfile.mkdtemp(prefix="thn-", dir="/tmp")
    inner_env["TMPDIR"] = inner_tmp
    try:
        out = _run(f"{second} -q -p no:cacheprovider tests/unit tests/integration/test_cron_http.py",
                   cwd=repo, env=inner_env, timeout=1500)
        summary = out.strip().splitlines()[-1]
        assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, out[-3000:]
        assert not _embedded_servers(inner_tmp), "the suite stopped its embedded servers"
    finally:
        shutil.rmtree(inner_tmp, ignore_errors=True)


def _embedded_servers(under: str) -> set[int]:
    """Pids of running ``postgres`` / ``redis-server`` processes whose working directory (their
    data directory) is below ``under``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.path.basename(os.readlink(f"/proc/{entry}/exe"))
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if exe in ("postgres", "redis-server") and cwd.startswith(under):
            found.add(int(entry))
    return found
