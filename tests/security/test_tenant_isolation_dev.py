"""Tenant isolation under ``takohost dev`` (docs/spec/host-features.md#hf-isolation, attack 9): the embedded default runs
the same sandbox. A real ``takohost dev`` (token, PostgreSQL cluster and password, and the Unix
socket of its embedded Redis in its data dir; PostgreSQL on a loopback port) runs the attack code deployed through its HTTP
API; the tenant is handed the real paths of the data dir's ``token``, cluster files and Redis
socket, the API and PostgreSQL ports, and the token itself to look for, and finds nothing.

The data dir is outside the pytest base directory (the test-only shared directory mounted into
every sandbox), so the sandbox sees exactly what it would see in a real ``takohost dev``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from tests.security import _attack_support as support
from tests.security._attack_support import output_of, run_attack
from tests.support import processes, workflows

UID_BASE = 1_300_000_000 + random.randrange(0, 100) * 1_000_000


@pytest.fixture(scope="module")
def dev():
    data = tempfile.mkdtemp(prefix="takohost-devdata-")
    port = processes.free_port()
    log = open(data + ".log", "ab")  # noqa: SIM115
    env = {k: v for k, v in os.environ.items() if k not in ("TAKOHOST_DATABASE_URL", "TAKOHOST_REDIS_URL",
                                                              "TAKOHOST_NAMESPACE", "TAKOHOST_BROKER_URL")}
    env["TAKOHOST_SANDBOX_UID_BASE"] = str(UID_BASE)
    proc = subprocess.Popen([sys.executable, "-m", "host_cli", "dev", "--data-dir", data, "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=data)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, open(log.name).read()
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200 and os.path.exists(
                        os.path.join(data, "token")):
                    break
            except requests.RequestException:
                pass
            time.sleep(0.3)
        with open(os.path.join(data, "token")) as f:
            token = f.read().strip()
        yield {"proc": proc, "data": data, "url": url, "port": port, "token": token}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)
        os.unlink(log.name)


def _redis_url_of_dev_worker(dev) -> str:
    """The embedded Redis URL, as the host's own processes were given it (root reads environ)."""
    for pid in support.descendants(dev["proc"].pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        except OSError:
            continue
        if b"TAKOHOST_REDIS_URL" in env:
            return env[b"TAKOHOST_REDIS_URL"].decode()
    raise AssertionError("no dev process has TAKOHOST_REDIS_URL")


def test_dev_mode_tenant_cannot_read_the_data_dir_reach_its_services_or_see_its_processes(dev):
    deployed = workflows.deploy_http(dev["url"], dev["token"], "dev", source=support.TENANT_SOURCE,
                                     class_name="Attack")
    http = workflows.HttpInstances(dev["url"], dev["token"], "dev", deployed.workflow)
    data = dev["data"]
    files = [os.path.join(data, name) for name in ("token", "postgres/data/PG_VERSION", "postgres/password",
                                                   "logs/worker.log", "logs/api.log", "logs/postgres.log")]
    assert os.path.exists(files[0]) and os.path.exists(files[1])
    found = output_of(run_attack(http, "read_files", {"paths": files, "dirs": [data, os.path.join(data, "logs")]}))
    leaked = {k: v for k, v in found.items() if v is True or (isinstance(v, str) and v.startswith(("READ", "LISTED")))}
    assert leaked == {}, leaked
    assert all(v.rsplit(":", 1)[-1] in ("ENOENT", "EACCES") for k, v in found.items() if isinstance(v, str)), found

    redis_url = _redis_url_of_dev_worker(dev)
    sockets = [os.path.join(data, "redis", "redis.sock")]
    assert all(os.path.exists(path) for path in sockets), sockets
    pg_port = int(open(os.path.join(data, "postgres", "data", "postmaster.pid")).read().splitlines()[3])
    # a UDP listener of the host: no datagram of the tenant may arrive at it
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.setblocking(False)
    udp_port = listener.getsockname()[1]
    try:
        connect = output_of(run_attack(http, "connect", {
            "tcp": [("127.0.0.1", dev["port"]), ("127.0.0.1", pg_port), ("127.0.0.1", udp_port)],
            "unix": sockets}))
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            print("received from the sandbox:", listener.recvfrom(100))
    finally:
        listener.close()
    # A datagram is "sent" into the context's own network namespace, where every address is
    # local (docs/egress.md): it reaches nothing, as the listener above shows.
    reached = {k: v for k, v in connect.items() if v in ("CONNECTED", "SENT", "OPENED", "UP")
               and not k.startswith("udp ")}
    assert reached == {}, reached

    host_pids = [pid for pid in support.descendants(dev["proc"].pid)
                 if pid not in support.sandbox_processes(UID_BASE)]
    needles = support.hexed(dev["token"], redis_url, os.path.join(data, "postgres"), "TAKOHOST_REDIS_URL=")
    environ = output_of(run_attack(http, "proc_environ", {"needles": needles, "host_pids": host_pids}))
    assert environ["hits"] == [] and environ["self_memory_hits"] == [] and environ["listed"] == [1], environ
    assert all(v.rsplit(":", 1)[-1] in ("ENOENT", "ESRCH") for v in environ["direct"].values()), environ["direct"]
