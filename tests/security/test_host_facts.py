"""Host facts in the sandbox (docs/spec/host-features.md#hf-neighbours), attacked as tenant code would: a context reads
what the kernel and the interpreter tell it about itself — its uid (``/proc/self/status``), its
command line (``sys.orig_argv``, ``/proc/self/cmdline``), ``sys.executable``, where the SDK
lives (module files, ``sys.path``, ``/proc/self/mountinfo``), ``/etc``, its host name and its
mounts — and tries to turn each into a fact of the host: its pid on the host, the host's
virtualenv or checkout, the host's name service configuration or host name, a ``proc`` of the
zygote's PID namespace.

Real processes: a zygote of the test's own with a random ``TAKOHOST_SANDBOX_UID_BASE``; no
Postgres or Redis.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import textwrap

import pytest

from takohost.runtime import isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Host paths a context must not learn: the checkout (the SDK's real place) and the virtualenv.
HOST_PATHS = sorted({REPO, os.path.realpath(REPO), sys.prefix, os.path.realpath(sys.prefix)})
UID_BASE = 1_200_000_000 + random.randrange(0, 100) * 1_000_000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-context identities need a root host")


@pytest.fixture(scope="module")
def zygote():
    from workers import sandbox

    policy = isolation.policy.Policy.from_environ({"TAKOHOST_SANDBOX_UID_BASE": str(UID_BASE)})
    z = sandbox.Zygote(policy=policy)
    z.start()
    yield z
    z.stop()


def _job(source: str, params: dict | None = None) -> dict:
    return {
        "kind": "workflow",
        "mainModule": "main.py",
        "modules": {"main.py": textwrap.dedent(source)},
        "className": "W",
        "event": {"instanceId": "i", "params": params or {}},
        "vars": {},
        "bindings": [],
    }


def _run(zygote, source: str, params: dict | None = None) -> tuple[int, dict]:
    """Run ``source``'s ``W.run`` in a fresh context: ``(the context's host pid, its output)``."""
    with zygote.spawn(_job(source, params)) as handle:
        answer = handle.recv(timeout=10)
        assert answer["op"] == "run_returned", answer
        return handle.pid, answer["output"]


def _host_paths_in(text: str) -> list[str]:
    return [path for path in HOST_PATHS if path and path != "/" and path in text]


# -- the uid -----------------------------------------------------------------------------------

UID = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        with open("/proc/self/status") as f:
            uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        # The default base is public: an identity of base + host pid gives the host pid away.
        return {"uid": uid, "guessed_host_pid": uid - event["params"]["base"]}
"""


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(line for line in f if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return None


def test_the_uid_does_not_give_the_host_pid_away(zygote):
    seen = []
    for _ in range(3):
        pid, found = _run(zygote, UID, {"base": UID_BASE})
        assert found["uid"] >= UID_BASE
        assert found["guessed_host_pid"] != pid, "the context's uid is the base plus its host pid"
        seen.append(found)
    # and the guess names no process of that identity on the host either
    assert all(_uid_of(f["guessed_host_pid"]) != f["uid"] for f in seen)


HOLD_UID = """
import os
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return {"uid": os.getuid()}
"""


def test_live_contexts_never_share_a_uid(zygote):
    handles = [zygote.spawn(_job(HOLD_UID)) for _ in range(6)]
    try:
        uids = []
        for handle in handles:  # every one is alive (not yet killed) while the others answer
            answer = handle.recv(timeout=10)
            assert answer["op"] == "run_returned", answer
            uids.append(answer["output"]["uid"])
        assert len(set(uids)) == len(uids), uids
    finally:
        for handle in handles:
            handle.kill_and_wait()
            handle.close()


# -- the command line and the interpreter ------------------------------------------------------

ARGV = """
import subprocess, sys
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        with open("/proc/self/cmdline", "rb") as f:
            cmdline = f.read().decode("utf-8", "replace")
        started = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
        return {
            "orig_argv": list(sys.orig_argv),
            "cmdline": cmdline.split("\\0"),
            "executable": sys.executable,
            "base_executable": getattr(sys, "_base_executable", ""),
            "prefix": sys.prefix,
            "exec_prefix": sys.exec_prefix,
            "runs": started.stdout.strip(),
        }
"""


def test_the_command_line_and_the_interpreter_name_no_host_path(zygote):
    _, found = _run(zygote, ARGV)
    assert _host_paths_in(repr(found)) == [], found
    assert found["orig_argv"][0] == "takohost-sandbox", found["orig_argv"]
    assert found["cmdline"][0] == "takohost-sandbox", found["cmdline"]
    assert found["executable"] == found["base_executable"] == "/takohost/bin/python3"
    assert found["runs"] == "42"  # and it is a working interpreter


# -- the SDK ------------------------------------------------------------------------------------

SDK = """
import sys
import takohost, takohost.runtime.step
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        files = sorted({getattr(m, "__file__", None) or "" for n, m in list(sys.modules.items())
                        if n == "takohost" or n.startswith("takohost.")})
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
        return {
            "files": files,
            "code": next(v.__code__.co_filename for v in vars(takohost.runtime.step).values()
                         if hasattr(v, "__code__")),
            "path": list(sys.path),
            "mountinfo": mountinfo,
            "loader": repr(vars(type(takohost.__loader__))) + repr(vars(takohost.__loader__)),
        }
"""


def test_the_sdk_lives_at_a_neutral_path(zygote):
    _, found = _run(zygote, SDK)
    assert _host_paths_in(repr(found)) == [], _host_paths_in(repr(found))
    files = [f for f in found["files"] if f]
    assert files and all(f.startswith("/takohost/sdk/takohost/") for f in files), files
    assert found["code"].startswith("/takohost/sdk/takohost/"), found["code"]
    assert "/takohost/sdk" in found["path"]


# -- /etc and the host name ---------------------------------------------------------------------

ETC = """
import os, socket
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        def read(path):
            try:
                with open(path) as f:
                    return f.read()
            except OSError as exc:
                return f"{type(exc).__name__}"
        return {
            "etc": sorted(os.listdir("/etc")),
            "root": sorted(os.listdir("/")),
            "hosts": read("/etc/hosts"),
            "resolv": read("/etc/resolv.conf"),
            "hostname": socket.gethostname(),
            "nodename": os.uname().nodename,
        }
"""


def _host_file(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def test_etc_and_the_host_name_are_the_contexts_own(zygote):
    _, found = _run(zygote, ETC)
    host_name = socket.gethostname()
    assert found["hostname"] == found["nodename"] == "localhost"
    # the host's name and its name servers (whatever they are) are not in the context's files
    if host_name != "localhost":
        assert host_name not in found["hosts"] and host_name not in found["resolv"]
    host_servers = [line for line in _host_file("/etc/resolv.conf").splitlines() if line.startswith("nameserver")]
    assert not any(line in found["resolv"].splitlines() for line in host_servers if line != "nameserver 127.0.0.1")
    assert "search" not in found["resolv"] and "domain" not in found["resolv"]
    assert found["hosts"].split() == ["127.0.0.1", "localhost", "::1", "localhost"]
    assert found["resolv"] == "nameserver 127.0.0.1\n"
    # what docs/security.md lists, and nothing else
    assert set(found["etc"]) <= {
        "localtime", "ssl", "nsswitch.conf", "hosts", "resolv.conf", "services", "protocols", "mime.types",
    }, found["etc"]
    assert {"hosts", "resolv.conf"} <= set(found["etc"])
    assert set(found["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc",
                                  "tmp", "takohost", *_prefix_tops()}, found["root"]


def _prefix_tops() -> set[str]:
    """The top-level directory of the interpreter's prefix (bound when it is not under /usr)."""
    prefix = os.path.realpath(sys.base_prefix)
    return set() if prefix.startswith("/usr/") else {prefix.strip("/").split("/")[0]}


# -- mounts -------------------------------------------------------------------------------------

MOUNTS = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        procs = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                fstype = fields[fields.index("-") + 1]
                if fstype == "proc":
                    procs.append(fields[4])
        return {"procs": procs}
"""


def test_no_proc_of_the_zygotes_pid_namespace_stays_mounted(zygote):
    _, found = _run(zygote, MOUNTS)
    assert found["procs"] == ["/proc"], found
