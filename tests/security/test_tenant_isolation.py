"""Tenant isolation, tested as an attacker would (docs/spec/host-features.md#hf-isolation; docs/spec/architecture.md#ar-sandbox "Tenant isolation").

One private stack of real processes — ``takohost api``, ``takohost worker`` (prefork, three pool
processes, so contexts run side by side) and ``takohost beat`` on their own database and Redis
namespace — serves the module. Two Spaces deploy ``tests/security/tenant_attacks.py`` as their
WorkerVersion: each test starts an instance whose step effect (or, once, a cron ``scheduled``
handler) performs one attack with everything an attacker could learn (the host's real pids,
paths, ports, socket paths and secrets, hex-encoded where the tenant must not hold them) and
returns what it found. Every test asserts that the attack failed, and where it matters that
the host is unharmed afterwards.

The stack's sandbox identities start at a random ``TAKOHOST_SANDBOX_UID_BASE`` so that the
process checks ("no sandbox process remains") see this module's sandboxes only, even with other
test sessions running on the machine.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid

import pytest

from models import db as models_db
from services import tokens
from tests.security import _attack_support as support
from tests.security._attack_support import output_of, run_attack
from tests.support import workflows

UID_BASE = 1_700_000_000 + random.randrange(0, 250) * 1_000_000
HOST_PACKAGES = ["workers", "models", "host_api", "beat", "psycopg", "celery", "redis", "sqlalchemy", "kombu",
                 "flask", "alembic", "fakeredis", "gunicorn", "requests"]
DENIED = {"ENOENT", "EACCES", "EPERM", "EROFS", "ESRCH"}


def _denied(value: object) -> bool:
    """An attack result meaning "refused": ``<ExceptionType>:<ERRNO>`` with a refusing errno."""
    return isinstance(value, str) and value.rsplit(":", 1)[-1] in DENIED


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cron_dir = tmp_path_factory.mktemp("cron")
    os.chmod(cron_dir, 0o1777)
    with workflows.private_stack(
        workers=1, worker_concurrency=3, lease_ttl_ms=3000, extra_env={"TAKOHOST_SANDBOX_UID_BASE": str(UID_BASE)}
    ) as s:
        s.cron_dir = cron_dir
        yield s


@pytest.fixture(scope="module")
def tenants(stack):
    """Two Spaces running the attack code: ``{"a": HttpInstances, "b": HttpInstances}``."""
    other = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        other_token = tokens.create_token_txn(session, space=other)
    out = {}
    for key, space, token in (("a", stack.space, stack.token), ("b", other, other_token)):
        deployed = workflows.deploy(stack.db_url, space=space, source=support.TENANT_SOURCE, class_name="Attack")
        out[key] = workflows.HttpInstances(stack.api_url, token, space, deployed.workflow)
    return out


@pytest.fixture(scope="module")
def http(tenants):
    return tenants["a"]


def _processes(stack) -> dict[str, list[int]]:
    """The host's processes of the stack by role (API master and workers, worker main and pool,
    the zygote — everything below them that is not a sandbox identity)."""
    table = support.proc_table()
    sandboxed = support.sandbox_processes(UID_BASE, table)
    out = {}
    for process in stack.processes:
        if process.alive():
            out.setdefault(process.name, []).extend(
                pid for pid in support.descendants(process.pid, table) if pid not in sandboxed
            )
    return out


def _host_pids(stack) -> list[int]:
    return sorted({pid for pids in _processes(stack).values() for pid in pids})


def _worker(stack):
    return next(p for p in stack.processes if p.name == "worker" and p.alive())


def _assert_worker_still_works(stack, http) -> None:
    assert _worker(stack).alive()
    final = run_attack(http, "none")
    assert final == {"id": final["id"], "status": "complete", "output": {"nothing": True}}


# ---------------------------------------------------------------------------------------------
# 1. credentials through /proc


def test_credentials_of_host_processes_are_not_in_reach(stack, http):
    run_attack(http, "none")  # the zygote exists
    pids = _processes(stack)
    assert {"api", "worker", "beat"} <= set(pids) and all(pids.values())
    secrets = [
        stack.db_url,
        stack.db_url.rsplit("/", 1)[1],
        stack.namespace,
        stack.token,
        "TAKOHOST_DATABASE_URL=",
        "TAKOHOST_REDIS_URL=",
        "TAKOHOST_NAMESPACE=",
    ]
    # the secrets are really in the host processes' environments (so the scan can tell)
    with open(f"/proc/{_worker(stack).pid}/environ", "rb") as f:
        assert stack.db_url.encode() in f.read()
    found = output_of(run_attack(http, "proc_environ", {"needles": support.hexed(*secrets),
                                                        "host_pids": _host_pids(stack)}))
    assert found["hits"] == [], found["hits"]
    assert found["self_memory_hits"] == [] and found["self_memory_scanned"] > 10 << 20, found
    assert not found["proc_self_environ_hit"]
    # only the context itself is listed: PID 1 of its own namespace, its own identity
    assert found["listed"] == [1], found["listed"]
    assert set(found["uids"].values()) == {found["uids"]["1"]} and int(found["uids"]["1"]) >= UID_BASE
    # the host's pids do not exist in the sandbox
    assert all(_denied(v) for v in found["direct"].values()), found["direct"]
    assert set(found["environ"]) <= {"PATH", "LANG"}, found["environ"]
    assert "TAKOHOST" not in found["proc1_environ"], found["proc1_environ"]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_the_host_pids_and_zygote_paths_are_not_in_what_a_child_inherits(stack, http):
    """The child is a copy of the zygote: its frames and objects must not tell the zygote's pid,
    its siblings' (the next contexts, of any Space), the host's, or the zygote's socket."""
    run_attack(http, "none")  # the zygote and its pre-spawned children exist
    mask = random.getrandbits(30)
    pids = _host_pids(stack) + sorted(support.sandbox_processes(UID_BASE))
    zygotes = [pid for pid in pids if _cmdline(pid).startswith(b"takohost-sandbox\0")]
    assert zygotes, "the zygote is among the pids (the scan could not tell otherwise)"
    paths = glob.glob("/tmp/takohost-zygote-*/zygote.sock") + glob.glob("/tmp/takohost-children-*")
    assert paths
    found = output_of(run_attack(http, "host_state", {
        "mask": mask, "masked_pids": [pid ^ mask for pid in pids], "uid_base": UID_BASE,
        "paths_hex": support.hexed(*paths),
    }))
    assert found["frames"] > 5 and found["objects"] > 5, found  # it really looked
    assert found["hits"] == [], "\n".join(found["hits"])


# ---------------------------------------------------------------------------------------------
# 2. another instance's params from memory


def test_a_concurrent_instance_cannot_read_another_instances_params_from_memory(stack, http, tmp_path):
    secret = f"TOPSECRET-{uuid.uuid4().hex}"
    canary = f"CANARY-{uuid.uuid4().hex}"
    ready, done = tmp_path / "victim-ready", tmp_path / "victim-done"
    victim = run_attack(http, "victim", {"secret": secret, "ready_file": str(ready), "done_file": str(done)},
                        wait=False)
    try:
        support.wait_file(ready)
        victims = support.sandbox_processes(UID_BASE)
        assert victims, "the victim's sandbox process is visible on the host"
        # the secret is really in the victim's memory (root on the host can see it)
        host_pids = _host_pids(stack) + sorted(victims)
        scanned = output_of(run_attack(http, "memory_scanner", {
            "secret_hex": secret.encode().hex(), "canary_hex": canary.encode().hex(), "host_pids": host_pids,
        }))
    finally:
        done.write_text("done")
    assert scanned["control_found"], "the scanner did not even find its own canary: the scan is broken"
    assert scanned["listed"] == [1]
    assert scanned["secret_scan"] == {"1": []}, scanned["secret_scan"]
    assert all(_denied(v) for v in scanned["direct"].values()), scanned["direct"]
    assert output_of(support.wait_terminal(http, victim["id"])) == {"held": 3}


# ---------------------------------------------------------------------------------------------
# 3. the host's packages


def test_host_packages_cannot_be_imported_even_with_their_real_paths(http):
    venv_site = sysconfig.get_path("purelib")
    files = [
        str(support.REPO / "workers" / "__init__.py"),
        str(support.REPO / "models" / "db.py"),
        os.path.join(venv_site, "psycopg", "__init__.py"),
        os.path.join(venv_site, "redis", "__init__.py"),
    ]
    assert all(os.path.exists(f) for f in files)
    paths = [str(support.REPO), venv_site, sysconfig.get_path("platlib"), sys.prefix,
             os.path.join(sys.prefix, "lib")]
    found = output_of(run_attack(http, "imports", {"packages": HOST_PACKAGES, "paths": paths, "files": files}))
    assert found["preloaded"] == []
    assert set(found["before"].values()) == {"ModuleNotFoundError"}, found["before"]
    assert set(found["after"].values()) == {"ModuleNotFoundError"}, found["after"]
    # the checkout's directory does not exist: the SDK is a copy at /takohost/sdk
    assert not any(found["exists"].values()), found["exists"]
    assert all(v.endswith(":ENOENT") for v in found["listing"].values()), found["listing"]
    assert set(found["by_file"].values()) == {"FileNotFoundError"}, found["by_file"]
    # sys.path: the standard library and the SDK's parent directory, nothing else
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    present = [p for p, exists in found["sys_path"].items() if exists]
    others = [p for p in present if not p.startswith(stdlib + os.sep) and p not in (stdlib, "/takohost/sdk")]
    assert others == [], found["sys_path"]
    assert "site-packages" not in " ".join(found["sys_path"])


# ---------------------------------------------------------------------------------------------
# 4. the host's services


def _host_addresses() -> list[str]:
    out = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only the route's source address
            out.append(s.getsockname()[0])
    except OSError:
        pass
    return [a for a in out if not a.startswith("127.")]


def test_host_services_are_unreachable(stack, http):
    api_port = int(stack.api_url.rsplit(":", 1)[1])
    zygote_sockets = glob.glob("/tmp/takohost-zygote-*/zygote.sock")
    assert zygote_sockets
    unix = ["/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5432",
            "/var/run/redis/redis-server.sock", "/run/redis/redis.sock", *zygote_sockets]
    tcp = [(host, port) for host in ("127.0.0.1", "::1", "0.0.0.0", *_host_addresses())
           for port in (5432, 6379, api_port)]
    # the services really answer on the host
    for port in (5432, 6379, api_port):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    # a UDP listener of the host on every address: no datagram of the tenant may arrive
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("0.0.0.0", 0))
    listener.setblocking(False)
    udp_port = listener.getsockname()[1]
    tcp += [(host, udp_port) for host in ("127.0.0.1", "0.0.0.0", *_host_addresses())]
    try:
        found = output_of(run_attack(http, "connect", {"tcp": tcp, "unix": unix,
                                                       "abstract": ["/tmp/.X11-unix/X0", "takohost"]}))
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            print("received from the sandbox:", listener.recvfrom(100))
    finally:
        listener.close()
    # A datagram is "sent" into the context's own network namespace, where every address is
    # local (docs/egress.md): it reaches nothing — the host's listener above received none.
    reached = {k: v for k, v in found.items() if v in ("CONNECTED", "SENT", "OPENED", "UP")
               and not k.startswith("udp ")}
    assert reached == {}, reached
    assert found["interfaces"] == ["lo"], found["interfaces"]  # route netlink still works
    for label in ("vsock_socket", "inet_seqpacket", "alg_socket", "netlink_uevents"):
        assert found[label].endswith("EPERM"), (label, found[label])  # the filter, not the kernel
    for key, value in found.items():
        if key.startswith("tcp "):
            assert value.rsplit(":", 1)[-1] in ("ENETUNREACH", "EADDRNOTAVAIL", "ECONNREFUSED"), (key, value)
        if key.startswith("udp "):
            assert value == "SENT" or value.rsplit(":", 1)[-1] in ("ENETUNREACH", "EADDRNOTAVAIL"), (key, value)
        if key.startswith("unix "):
            assert value.endswith(":ENOENT"), (key, value)


# ---------------------------------------------------------------------------------------------
# 5. signals to the host


def test_signals_to_host_processes_fail_and_the_worker_still_works(stack, http):
    pids = _host_pids(stack)
    before = {p.name: p.alive() for p in stack.processes}
    found = output_of(run_attack(http, "signals", {"host_pids": pids}))
    sent = {k: v for k, v in found.items() if k != "kill -1" and not v.endswith(":ESRCH")}
    assert sent == {}, sent
    time.sleep(0.5)
    assert {p.name: p.alive() for p in stack.processes} == before
    table = support.proc_table()
    stopped = [pid for pid in pids if pid in table and table[pid]["state"] == "T"]
    assert stopped == [], f"host processes stopped by the tenant: {stopped}"
    _assert_worker_still_works(stack, http)


# ---------------------------------------------------------------------------------------------
# 6. the host's files


def _tree_digest(root: str) -> str:
    listed = subprocess.run(["git", "ls-files", "-s", "--", root], cwd=support.REPO, capture_output=True,
                            text=True, check=True).stdout
    digest = hashlib.sha256(listed.encode())
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                digest.update(name.encode() + f.read())
    return digest.hexdigest()


def test_host_code_venv_tmp_and_usr_cannot_be_written(http):
    sdk = os.path.dirname(os.path.realpath(__import__("takohost").__file__))
    venv_site = sysconfig.get_path("purelib")
    marker = f"takohost-pwned-{uuid.uuid4().hex[:8]}"
    before = {d: _tree_digest(d) for d in (sdk, str(support.REPO))}
    init_stat = os.stat(os.path.join(sdk, "__init__.py"))
    params = {
        "append": [os.path.join(sdk, "__init__.py"), os.path.join(sdk, "runtime", "isolation", "forking.py"),
                   str(support.REPO / "workers" / "__init__.py"), os.path.join(venv_site, "redis", "__init__.py"),
                   sys.executable, "/etc/hosts", "/usr/lib/os-release", "/etc/passwd"],
        "create": [os.path.join(sdk, f"{marker}.py"), str(support.REPO / f"{marker}.py"),
                   os.path.join(venv_site, f"{marker}.pth"), os.path.join(venv_site, f"{marker}.py"),
                   f"/usr/{marker}", f"/usr/local/{marker}", f"/{marker}", f"/etc/{marker}",
                   f"/dev/{marker}", f"/proc/{marker}", f"/tmp/{marker}"],
        "mutate": [os.path.join(sdk, "__init__.py"), os.path.join(sdk, "errors.py"), "/usr/bin/env"],
        "mkdir": [os.path.join(sdk, marker), f"/usr/{marker}", f"/{marker}-dir"],
    }
    found = output_of(run_attack(http, "write", params))
    private_tmp = f"create /tmp/{marker}"
    assert found.pop(private_tmp) == "WRITTEN"  # its own scratch /tmp: private, gone with the context
    assert not os.path.exists(f"/tmp/{marker}"), "the context's /tmp is the host's /tmp"
    succeeded = {k: v for k, v in found.items() if not _denied(v)}
    assert succeeded == {}, succeeded
    assert {d: _tree_digest(d) for d in (sdk, str(support.REPO))} == before
    after = os.stat(os.path.join(sdk, "__init__.py"))
    assert (after.st_mtime_ns, after.st_mode, after.st_size) == (
        init_stat.st_mtime_ns, init_stat.st_mode, init_stat.st_size)
    leftovers = [p for p in params["create"] + params["mkdir"] if os.path.exists(p)]
    assert leftovers == []


# ---------------------------------------------------------------------------------------------
# 7. processes that outlive their context


def _daemon_uid(path) -> int:
    line = workflows.wait_until(lambda: path.exists() and path.read_text().split("\n", 1)[0], timeout=30,
                                message="the daemon's first line")
    return int(str(line).split()[1])


def _no_process_of(uid: int) -> None:
    left = [pid for pid, info in support.proc_table().items() if info["uid"] == uid and info["state"] != "Z"]
    assert left == [], f"processes of the finished context's identity {uid} remain: {left}"


def test_a_setsid_double_fork_daemon_dies_when_the_instance_completes(http, tmp_path):
    ticks = tmp_path / "ticks"
    final = run_attack(http, "daemon", {"file": str(ticks)})
    support.assert_stops_growing(ticks, "after complete")
    assert final["status"] == "complete" and final["output"] == {"spawned": True}
    _no_process_of(_daemon_uid(ticks))


def test_a_daemon_started_by_replayed_code_dies_with_its_context(http, tmp_path):
    ticks = tmp_path / "ticks"
    final = run_attack(http, "daemon_in_run", {"file": str(ticks)})
    support.assert_stops_growing(ticks, "after complete (daemon outside any effect)")
    assert final["status"] == "complete"
    _no_process_of(_daemon_uid(ticks))


def test_a_daemon_dies_when_its_instance_goes_to_sleep(http, tmp_path):
    ticks = tmp_path / "ticks"
    started = run_attack(http, "daemon_then_sleep", {"file": str(ticks)}, wait=False)
    workflows.wait_until(lambda: http.status(started["id"])["status"] == "sleeping", timeout=60,
                         interval=0.05, message="sleeping")
    support.assert_stops_growing(ticks, "after sleeping")
    _no_process_of(_daemon_uid(ticks))
    assert http.call("POST", f"/{http.enc(started['id'])}/terminate")[0] == 200


# ---------------------------------------------------------------------------------------------
# 8. resource exhaustion


def test_a_memory_bomb_fails_its_attempts_and_the_worker_survives(stack, http):
    final = run_attack(http, "memory_bomb", {"retry": {"maxAttempts": 2}}, timeout=90)
    assert final["status"] == "errored", final
    assert final["error"]["reason"] == "step_failed", final
    assert "MemoryError" in json.dumps(final["error"]), final
    _assert_worker_still_works(stack, http)
    got = output_of(run_attack(http, "memory_incremental"))
    assert 0 < got["mib"] <= 1024, got


def test_a_fork_bomb_is_capped_and_the_worker_survives(stack, http):
    found = output_of(run_attack(http, "fork_bomb", timeout=120))
    assert found["processes"] < 64 and found["error"] and found["error"].endswith("EAGAIN"), found
    assert found["threads"] < 64 and found["thread_error"], found
    _assert_worker_still_works(stack, http)


def test_open_files_and_file_size_are_limited(stack, http, tmp_path):
    opened = output_of(run_attack(http, "open_files"))
    assert opened["opened"] < 256 and opened["error"].endswith("EMFILE"), opened
    big = output_of(run_attack(http, "big_file", {"paths": ["/tmp/big", str(tmp_path / "big")]}))
    assert big["/tmp/big"]["error"].rsplit(":", 1)[-1] in ("EFBIG", "ENOSPC"), big
    assert big["/tmp/big"]["mib"] <= 64, big
    assert big[str(tmp_path / "big")]["error"].endswith("EFBIG") and big[str(tmp_path / "big")]["mib"] <= 64, big
    _assert_worker_still_works(stack, http)


# ---------------------------------------------------------------------------------------------
# 10. identity and privileges; the rest of an attacker's list


def test_no_capabilities_no_new_privs_own_identity(http):
    found = output_of(run_attack(http, "privileges"))
    status = found["status"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, (cap, status)
    assert status["NoNewPrivs"] == "1", status
    assert found["uid"] == found["euid"] == found["gid"] and found["uid"] not in (0, os.getuid())
    assert found["uid"] >= UID_BASE and found["groups"] == []
    assert found["setuid0"].endswith("EPERM"), found["setuid0"]
    assert found["pid"] == 1 and found["ppid"] == 0
    # stdio (stdout/stderr are pipes to the context's own log capture, read ends 4 and 5), the
    # channel, and the descriptor listdir itself used
    assert sorted(found["fds"], key=int) in ([str(n) for n in range(6)], [str(n) for n in range(7)]), found["fds"]
    assert all(target.startswith(("/dev/null", "socket:", "/proc/", "pipe:")) for target in found["fds"].values()), found
    # the host's checkout, venv, home and data do not exist in the sandbox's file system
    mounts = " ".join(found["mountinfo"])
    for path in (sysconfig.get_path("purelib"), str(support.REPO / "workers"), "/root", "/home", "/var"):
        assert f" {path} " not in mounts, (path, found["mountinfo"])


def test_mounts_namespaces_chroot_sysfs_and_shm_are_refused(http):
    found = output_of(run_attack(http, "escape"))
    for key in ("mount tmpfs", "mount proc", "mount sysfs", "remount / rw", "remount /usr rw", "umount /proc"):
        assert found[key] == "EPERM", (key, found[key])
    assert found["chroot"].endswith("EPERM")
    for ns in ("mount", "net", "pid"):
        assert found[f"unshare {ns}"]["unshare"] == "EPERM", found[f"unshare {ns}"]
    # (a nested user namespace: see test_tenant_open_holes.py if it is allowed; what it may buy:)
    after = found["unshare user"].get("after", {})
    for key in ("mount proc", "remount / rw", "remount /usr rw", "umount /proc"):
        assert after.get(key, "EPERM") in ("EPERM", "EINVAL", "EACCES"), (key, found["unshare user"])
    assert max(after.get("proc pids", [1])) < 64  # still only its own PID namespace
    for ns in ("mnt", "pid", "net", "user", "ipc", "uts"):
        assert found[f"setns {ns}"] in ("EPERM", "EINVAL"), (ns, found[f"setns {ns}"])
    assert found["proc pids"] == [1]
    for path in ("/sys", "/sys/fs/cgroup", "/dev/shm", "/dev/mqueue", "/run", "/var/run", "/home", "/sys/kernel"):
        assert _denied(found[f"list {path}"]), (path, found[f"list {path}"])
    # /root, /work: at most the empty parents of the read-only interpreter prefix and SDK mounts
    mounted = [os.path.realpath(sys.base_prefix), os.path.dirname(os.path.realpath(__import__("takohost").__file__))]
    for path in ("/root", "/work"):
        allowed = {m[len(path) + 1:].split("/")[0] for m in mounted if m.startswith(path + "/")}
        listing = found[f"list {path}"]
        assert _denied(listing) or set(listing.removeprefix("LISTED:").split(",")) <= allowed, (path, listing)
    for path in ("/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
                 "/proc/self/uid_map"):
        assert _denied(found[f"write {path}"]), (path, found[f"write {path}"])
    assert not found["shm_open"].startswith("CREATED"), found["shm_open"]


def test_what_other_contexts_and_the_host_open_cannot_be_watched(http):
    found = output_of(run_attack(http, "watch"))
    assert found == {"inotify_init1": "EPERM", "fanotify_init": "EPERM"}, found


def test_no_abstract_socket_or_sysv_ipc_between_contexts_of_different_spaces(tenants, tmp_path):
    tag = f"takohost-attack-{uuid.uuid4().hex[:8]}"
    ready, done = tmp_path / "holder-ready", tmp_path / "holder-done"
    common = {"tag": tag, "ipc_key": random.randrange(1 << 20, 1 << 30), "secret": f"KEY-{uuid.uuid4().hex}"}
    holder = run_attack(tenants["a"], "channel_holder",
                        {**common, "ready_file": str(ready), "done_file": str(done)}, wait=False)
    try:
        support.wait_file(ready)
        seeker = output_of(run_attack(tenants["b"], "channel_seeker", common))
    finally:
        done.write_text("done")
    held = output_of(support.wait_terminal(tenants["a"], holder["id"]))
    assert held["abstract"] == "BOUND" and held["abstract_dgram"] == "BOUND", held
    assert held["shmget"] >= 0 and held["msgget"] >= 0 and held["semget"] >= 0, held
    assert seeker["abstract"].endswith("ECONNREFUSED"), seeker
    assert seeker["abstract_dgram"].endswith("ECONNREFUSED"), seeker
    assert held["accepted"] == 0
    assert (seeker["shmget"], seeker["msgget"], seeker["semget"]) == ("ENOENT", "ENOENT", "ENOENT"), seeker
    # keyrings: the holder's keys (session, user, process keyrings) are not reachable from the
    # seeker's keyrings (a key left readable to everyone: see test_tenant_open_holes.py)
    # (the kernel keyrings are refused by the seccomp filter: EPERM; if not, unreachable)
    assert all(isinstance(held[f"add_key {k}"], int) or held[f"add_key {k}"] == "EPERM"
               for k in ("session", "user", "user_session", "process")), held
    searches = {k: v for k, v in seeker.items() if k.startswith("search ")}
    assert not any(str(v).startswith("FOUND") for v in searches.values()), searches
    listed = json.dumps(seeker["keyrings"])
    assert tag not in listed and common["secret"] not in listed, seeker["keyrings"]


def test_a_key_left_in_the_user_keyring_is_not_read_by_another_space_later(tenants):
    """Space A's context leaves a key readable by everyone in its user keyring (keyrings are per
    uid, not per namespace, and outlive the context); later Space B's context lists ``/proc/keys``
    and reads every key with the tag by serial."""
    tag = f"takohost-drop-{uuid.uuid4().hex[:8]}"
    secret = f"SPACE-A-SECRET-{uuid.uuid4().hex}"
    left = output_of(run_attack(tenants["a"], "keyring_leave", {"tag": tag, "secret": secret}))
    assert isinstance(left["add_key"], int) or left["add_key"] == "EPERM", left
    found = output_of(run_attack(tenants["b"], "keyring_find", {"tag": tag}))
    assert secret not in json.dumps(found), f"Space B read Space A's key: {found}"


def test_a_context_cannot_create_a_nested_user_namespace(http):
    found = output_of(run_attack(http, "escape"))
    assert found["unshare user"]["unshare"] != "UNSHARED", found["unshare user"]


# ---------------------------------------------------------------------------------------------
# a cron ``scheduled`` handler is sandboxed the same way


def test_a_cron_handler_gets_the_same_sandbox(stack):
    from tests.integration.test_cron_support import create_stack

    marker = stack.cron_dir / "found.json"
    needles = support.hexed(stack.db_url, stack.namespace, stack.token, "TAKOHOST_DATABASE_URL=")
    api_port = int(stack.api_url.rsplit(":", 1)[1])
    params = {
        "attacks": ["proc_environ", "imports", "connect", "privileges"],
        "proc_environ": {"needles": needles, "host_pids": _host_pids(stack)},
        "imports": {"packages": HOST_PACKAGES, "paths": [str(support.REPO), sysconfig.get_path("purelib")],
                    "files": [str(support.REPO / "workers" / "__init__.py")]},
        "connect": {"tcp": [("127.0.0.1", 5432), ("127.0.0.1", 6379), ("127.0.0.1", api_port)],
                    "unix": glob.glob("/tmp/takohost-zygote-*/zygote.sock")},
        "privileges": {},
    }
    create_stack(stack.db_url, space=stack.space, cron="* * * * *", source=support.TENANT_SOURCE,
                 variables={"MARKER": str(marker), "PARAMS": params},
                 now=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
    workflows.wait_until(marker.exists, timeout=130, interval=0.5, message="a cron delivery")
    time.sleep(0.2)
    found = json.loads(marker.read_text())
    env = found["proc_environ"]
    assert env["hits"] == [] and env["self_memory_hits"] == [] and env["listed"] == [1], env
    assert all(_denied(v) for v in env["direct"].values()), env["direct"]
    assert set(found["imports"]["after"].values()) == {"ModuleNotFoundError"}, found["imports"]
    # (datagrams are "sent" into the context's own namespace: test_host_services_are_unreachable
    # shows that none arrives)
    reached = {k: v for k, v in found["connect"].items()
               if v in ("CONNECTED", "SENT", "OPENED", "UP") and not k.startswith("udp ")}
    assert reached == {}, reached
    status = found["privileges"]["status"]
    assert int(status["CapEff"], 16) == int(status["CapBnd"], 16) == 0 and status["NoNewPrivs"] == "1"
    assert found["privileges"]["uid"] >= UID_BASE


def test_the_memory_limit_holds_for_the_context_not_per_process(tenants):
    """``RLIMIT_AS`` (1 GiB) is per process and ``RLIMIT_NPROC`` allows 64 processes: without a
    memory cgroup per context, one context held 4 GiB of touched memory by forking (up to ~64 GiB,
    enough to make the kernel's OOM killer pick host processes). The context's cgroup caps the
    processes together."""
    held = output_of(run_attack(tenants["a"], "memory_spread", {"total_mib": 4200, "each_mib": 700},
                                timeout=120))
    assert held["held_mib"] <= 1024, f"one context held {held['held_mib']} MiB at once: {held}"


# ---------------------------------------------------------------------------------------------
# last: the worker is stopped under a running daemon (it ends the module's worker)

def test_no_sandbox_process_survives_the_worker_being_stopped(stack, http, tmp_path):
    ticks = tmp_path / "ticks"
    run_attack(http, "daemon_then_loop", {"file": str(ticks)}, wait=False)
    uid = _daemon_uid(ticks)
    workflows.wait_until(lambda: support.file_size(ticks) > 200, timeout=30, message="ticking")
    assert any(info["uid"] == uid for info in support.proc_table().values())
    worker = _worker(stack)
    worker.stop(timeout=30)
    assert not worker.alive()
    assert worker.proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), worker.proc.returncode
    left = workflows.wait_until(lambda: not support.sandbox_processes(UID_BASE) or None, timeout=5,
                                interval=0.05, message="no sandbox process")
    assert left is True
    assert support.sandbox_processes(UID_BASE) == {}
    support.assert_stops_growing(ticks, "after the worker stopped")

