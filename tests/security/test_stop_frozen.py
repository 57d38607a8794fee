"""The stop proof by a frozen cgroup (docs/spec/host-features.md), attacked: tenant code leaves a descendant
that escaped its process group and session (``setsid`` after a double fork) writing to a file
shared with the test as fast as it can, each line stamped with the monotonic clock (the sandbox
shares the host's). Once ``kill_and_wait`` has returned — the moment a status may be published —
no line stamped later is ever written, the file never grows, and the whole context is gone soon
after (killed while frozen, reaped off the caller's path).

Real processes: a zygote of the test's own with a shared directory; no Postgres or Redis.
"""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from takohost.runtime import isolation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-context cgroups need a root host")

DAEMON = """
import os, time
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        path = event["params"]["file"]
        first = os.fork()
        if first == 0:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            n = 0
            while True:
                n += 1
                os.write(fd, f"{n} {time.monotonic_ns()}\\n".encode())
                time.sleep(0.0002)
        os.waitpid(first, 0)
        while not os.path.exists(path) or os.path.getsize(path) < 200:
            time.sleep(0.001)
        return {"daemon": "writing"}
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stop-frozen")
    os.chmod(directory, 0o1777)
    return directory


@pytest.fixture(scope="module")
def zygote(shared):
    from workers import sandbox

    z = sandbox.Zygote(policy=isolation.policy.Policy(test_shared_dir=str(shared)))
    z.start()
    yield z
    z.stop()


def _job(path: str) -> dict:
    return {
        "kind": "workflow",
        "mainModule": "main.py",
        "modules": {"main.py": textwrap.dedent(DAEMON)},
        "className": "W",
        "event": {"instanceId": "i", "params": {"file": path}},
        "vars": {},
        "bindings": [],
    }


def _stamps(path) -> list[int]:
    with open(path) as f:
        return [int(line.split()[1]) for line in f.read().splitlines() if len(line.split()) == 2]


def _stop_a_writing_daemon(zygote, path) -> str:
    """Run a context whose detached descendant keeps writing, stop it, and check that nothing is
    written after the stop was proven; returns which proof held (``frozen`` or ``exited``)."""
    with zygote.spawn(_job(str(path))) as handle:
        answer = handle.recv(timeout=10)
        assert answer == {"op": "run_returned", "output": {"daemon": "writing"}}, answer
        assert handle.kill_and_wait() is True
        proven = time.monotonic_ns()
        proof = handle.stop_proof
        assert proof in ("frozen", "exited"), proof
        size = path.stat().st_size
        stamps = _stamps(path)
        assert len(stamps) > 10 and max(stamps) < proven, "a line was written after the proof"
        time.sleep(0.5)
        assert path.stat().st_size == size, "the descendant wrote after the stop was proven"
        deadline = time.monotonic() + 5
        while not handle.exited and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handle.exited, "the stopped context was not killed after the proof"
    assert path.stat().st_size == size
    return proof


def test_a_detached_descendant_never_writes_after_the_stop_is_proven(zygote, shared):
    """Three contexts in a row: whichever proof held (a freeze not confirmed within 1 s on a
    loaded machine falls back to the exit), nothing is written after it; the freezer holds it
    for at least one of them (on this machine kind it holds for all three when quiet)."""
    proofs = [_stop_a_writing_daemon(zygote, shared / f"daemon-{i}.log") for i in range(3)]
    assert "frozen" in proofs, proofs


SLEEPER = """
import time
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("wait", lambda: time.sleep(3600))
"""


def test_a_context_frozen_by_a_worker_that_went_away_is_killed_not_left_frozen(zygote):
    """The worker froze a context to stop it and died before killing and thawing it: the zygote
    sees its connection drop and stops the frozen context (on cgroup v1 nothing else could: a
    frozen task takes no SIGKILL)."""
    job = _job("unused")
    job["modules"] = {"main.py": textwrap.dedent(SLEEPER)}
    handle = zygote.spawn(job)
    try:
        assert handle.recv(timeout=10)["op"] == "do"
        assert isolation.cgroups.freeze(handle._freezer_fd, timeout=1.0)
        zygote._client.close()  # the worker's connection to the zygote drops (it died)
        zygote._client = None
        deadline = time.monotonic() + 5
        while not handle.exited and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handle.exited, "the frozen context was left frozen"
    finally:
        handle.close()
