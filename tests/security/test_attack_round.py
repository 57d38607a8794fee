"""An attack round on today's changes, written the way an attacker would, against real processes.

1. **The packed, binary-searched system-call filter** (``isolation.seccomp``, ``forking.Forker``):
   tenant code in a real context calls every denied system call with the real kernel (plain, with
   the x32 bit ``0x40000000``, from a second thread), ``clone`` with each ``CLONE_NEW*`` flag,
   ``clone3``, numbers just below the x32 bit and above the table, and the i386 ABI through
   ``int 0x80`` (another architecture: the process is killed by ``SIGSYS``).
2. **The memory cgroup made by the zygote** (``isolation.cgroups``): tenant code looks for any
   way to its cgroup files (mounts, inherited descriptors, the host's paths of its own and of a
   concurrent context's cgroup, mounting a cgroup file system) to raise its limit or move itself;
   the host checks that it stays in its own memory cgroup with the policy's limit.
3. **Cron deliveries on the shared heartbeat and session** (``workers.sandbox``): a handler that
   ignores signals and leaves a ``setsid`` double-forked descendant writing stamped lines is
   stopped, and proven stopped, at its time limit, on its trigger's DELETE and when its lease is
   taken by someone else (no line stamped after ``deliver`` returned; the other owner's lease is
   left alone).
4. **The instance routes in Flask's URL map** (``host_api.routing``): with Space A's token, path
   tricks (encoded and double-encoded slashes, dot segments, NUL, overlong UTF-8, mixed-case
   escapes, trailing slashes, absolute-form targets, HEAD/OPTIONS) against Space B's instances
   and resources never answer with B's data.

Real processes throughout: a zygote of the test's own (1, 2), deliveries run in the test process
on real Postgres, Redis and sandbox children (3), a real ``takohost api`` server (4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import http.client
import json
import os
import platform
import threading
import time
import uuid

import pytest

from core import config
from models import db as models_db
from models import resources as res_models
from services import redis_client, redis_keys, tokens
from takohost.runtime import isolation
from takohost.runtime.isolation import seccomp
from tests.support import sandbox_jobs, workflows

MACHINE = platform.machine()

# ---------------------------------------------------------------------------------------------
# a zygote of the test's own (sections 1 and 2)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    directory = tmp_path_factory.mktemp("attack-round")
    os.chmod(directory, 0o1777)
    return directory


@pytest.fixture(scope="module")
def zygote(shared):
    from workers import sandbox

    z = sandbox.Zygote(policy=isolation.policy.Policy(test_shared_dir=str(shared), memory_mb=300))
    z.start()
    yield z
    z.stop()


_job = sandbox_jobs.workflow_job
_run = sandbox_jobs.run_output


SYSCALLS = """
import ctypes, errno, mmap, os, signal, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in (args or (0, 0, 0, 0, 0, 0))])
    if result >= 0:
        if result == 0 and nr in CLONES and os.getpid() != 1:
            os._exit(0)  # a clone that was allowed: the child leaves at once
        return "ALLOWED"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

CLONES = set()

def int80():
    # i386 ABI: mov eax, 20 (getpid); int 0x80; ret
    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(bytes.fromhex("b814000000cd80c3"))
    function = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))
    pid = os.fork()
    if pid == 0:
        function()
        os._exit(7)  # the other ABI's call returned: not killed
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit {os.WEXITSTATUS(status)}"

class W:
    def __init__(self, env): pass
    def run(self, event, step):
        p = event["params"]
        CLONES.add(p["clone"])
        found = {"plain": {}, "x32": {}, "thread": {}, "clone": {}, "numbers": {}}
        for name, nr in p["denied"].items():
            found["plain"][name] = call(nr)
            found["x32"][name] = call(nr | 0x40000000)
        def in_thread():
            for name, nr in p["denied"].items():
                found["thread"][name] = call(nr)
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        for name, flag in p["clone_flags"].items():
            found["clone"][name] = call(p["clone"], flag | signal.SIGCHLD, 0, 0, 0, 0)
        for nr in p["numbers"]:
            found["numbers"][str(nr)] = call(nr)
        found["clone3"] = call(p["clone3"])
        with open("/proc/self/status") as f:
            found["status"] = {k: v.strip() for k, v in (l.split(":", 1) for l in f if l.startswith("Seccomp"))}
        if p["int80"]:
            found["int80"] = int80()
        return found
"""


def test_every_denied_system_call_is_refused_by_the_real_kernel(zygote):
    """The packed, binary-searched filter as the kernel runs it: each call the policy denies (and
    its x32 twin) is EPERM, in the first thread and in a later one; clone's namespace flags EPERM;
    clone3 ENOSYS; numbers the filter does not know reach the kernel (ENOSYS), at and above the
    x32 bit they are EPERM; the i386 ABI kills the process."""
    denied = seccomp.DENIED_CALLS[MACHINE]
    flags = {name: getattr(isolation.syscalls, name) for name in dir(isolation.syscalls)
             if name.startswith("CLONE_NEW") and name != "CLONE_NEW_ANY"}
    numbers = [511, 1023, 4095, 0x3FFFFFFF, 0x40000000, 0x40000000 + 512, 0x7FFFFFFF]
    found = _run(zygote, SYSCALLS, {
        "denied": denied, "clone": seccomp.CLONE[MACHINE], "clone3": seccomp.CLONE3,
        "clone_flags": flags, "numbers": numbers, "int80": MACHINE == "x86_64",
    })
    assert found["plain"] == {name: "EPERM" for name in denied}, found["plain"]
    assert found["thread"] == {name: "EPERM" for name in denied}, found["thread"]
    if MACHINE == "x86_64":
        assert found["x32"] == {name: "EPERM" for name in denied}, found["x32"]
        assert found["int80"] == "SIGSYS", found["int80"]
    assert len(flags) >= 7 and found["clone"] == {name: "EPERM" for name in flags}, found["clone"]
    assert found["clone3"] == "ENOSYS"
    assert found["numbers"] == {
        "511": "ENOSYS", "1023": "ENOSYS", "4095": "ENOSYS", str(0x3FFFFFFF): "ENOSYS",
        str(0x40000000): "EPERM", str(0x40000000 + 512): "EPERM", str(0x7FFFFFFF): "EPERM",
    }, found["numbers"]
    assert found["status"]["Seccomp"] == "2" and found["status"]["Seccomp_filters"] == "1", found["status"]


CGROUP_PROBE = """
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
MAGIC = {0x27E0EB: "cgroup", 0x63677270: "cgroup2", 0x62656572: "sysfs"}

def err(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) else repr(exc)

def try_open(path, flags):
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return err(exc)
    os.close(fd)
    return "OPENED"

def fs_type(fd):
    buf = ctypes.create_string_buffer(256)
    if libc.fstatfs(fd, buf) != 0:
        return None
    return MAGIC.get(ctypes.c_long.from_buffer(buf).value)

class W:
    def __init__(self, env): pass
    def run(self, event, step):
        p = event["params"]
        found = {}
        with open("/proc/self/cgroup") as f:
            found["cgroup"] = f.read().splitlines()
        with open("/proc/self/mountinfo") as f:
            found["cgroup mounts"] = [l for l in f if "cgroup" in l or "sysfs" in l]
        found["fds"] = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                found["fds"][name] = [os.readlink(f"/proc/self/fd/{name}"), fs_type(int(name))]
            except OSError as exc:
                found["fds"][name] = err(exc)
        found["opens"] = {}
        for path in p["paths"]:
            flags = os.O_WRONLY if path.endswith(("procs", "limit_in_bytes", "max")) else os.O_RDONLY
            found["opens"][path] = try_open(path, flags)
            found["opens"]["/proc/1/root" + path] = try_open("/proc/1/root" + path, flags)
        found["mounts"] = {}
        os.makedirs("/tmp/cg", exist_ok=True)
        for fstype, options in (("cgroup", b"memory"), ("cgroup2", None), ("sysfs", None)):
            ctypes.set_errno(0)
            r = libc.mount(fstype.encode(), b"/tmp/cg", fstype.encode(), 0, options)
            found["mounts"][fstype] = "MOUNTED" if r == 0 else errno.errorcode.get(ctypes.get_errno())
        found["uid"] = os.getuid()
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            found["raise RLIMIT_AS"] = "RAISED"
        except (OSError, ValueError) as exc:
            found["raise RLIMIT_AS"] = type(exc).__name__
        open(p["ready"], "w").close()
        deadline = time.time() + 20
        while not os.path.exists(p["go"]) and time.time() < deadline:
            time.sleep(0.01)
        return found
"""


def _memory_cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    [path] = [p for _, controllers, p in lines if "memory" in controllers.split(",")]
    return path


def _memory_root() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup" and "memory" in fields[sep + 3].split(","):
                return fields[4]
    raise AssertionError("no cgroup v1 memory hierarchy")


def test_a_context_cannot_reach_its_own_or_another_contexts_memory_cgroup(zygote, shared):
    """Two contexts at once, each told the host's paths of both memory cgroups (its own and the
    other's: its limit file, ``cgroup.procs``, the zygote's directory): neither finds a cgroup or
    sysfs mount, descriptor or path, nor mounts one; the host sees each in its own ``ctx-<n>``
    with the policy's limit, unchanged after the attempts, and nothing of the cgroup writable by
    the context's identity."""
    if os.geteuid() != 0:
        pytest.fail("this attack needs a root host (per-context cgroups)")
    root = _memory_root()
    handles, paths = [], []
    try:
        for n in range(2):
            ready, go = shared / f"cg-ready-{n}", shared / f"cg-go-{n}"
            handle = zygote.spawn(_job("import time\nclass W:\n  def __init__(s, e): pass\n"
                                       "  def run(s, e, st):\n    time.sleep(30)\n", {}))
            handles.append(handle)
            paths.append(root + _memory_cgroup_of(handle.pid))
        probes = []
        for n, host_dir in enumerate(paths):
            ready, go = shared / f"cg-ready-{n}", shared / f"cg-go-{n}"
            targets = []
            for directory in (*paths, os.path.dirname(host_dir)):
                targets += [directory, f"{directory}/cgroup.procs", f"{directory}/memory.limit_in_bytes",
                            f"{directory}/memory.memsw.limit_in_bytes", f"{directory}/tasks"]
            targets += ["/sys/fs/cgroup", "/sys/fs/cgroup/memory/cgroup.procs", "/sys/fs/cgroup/unified"]
            probes.append((ready, go, zygote.spawn(_job(CGROUP_PROBE, {
                "paths": targets, "ready": str(ready), "go": str(go)}))))
        for ready, go, handle in probes:
            # ready: every attempt below was made; the context waits for "go", still alive
            workflows.wait_until(ready.exists, timeout=20, message="the probe ready")
            own = root + _memory_cgroup_of(handle.pid)
            assert os.path.basename(own).startswith("ctx-") and own not in paths, own
            assert os.path.dirname(own) == os.path.dirname(paths[0]), (own, paths)
            with open(f"{own}/memory.limit_in_bytes") as f:
                assert int(f.read()) == 300 << 20, "the context changed its limit"
            for name in ("", "/cgroup.procs", "/memory.limit_in_bytes"):
                st = os.stat(own + name)
                assert st.st_uid == 0 and not st.st_mode & 0o022, (name, oct(st.st_mode))
            go.write_text("go")
            answer = handle.recv(timeout=20)
            assert answer.get("op") == "run_returned", answer
            found = answer["output"]
            assert found["uid"] != 0
            assert all(line.endswith(":/") for line in found["cgroup"]), found["cgroup"]
            assert found["cgroup mounts"] == [], found["cgroup mounts"]
            # (the descriptor listdir used is closed by the time it is read: ENOENT/EBADF)
            fds = {k: v for k, v in found["fds"].items() if isinstance(v, list)}
            assert len(fds) >= 4 and all(v[1] is None for v in fds.values()), json.dumps(found["fds"])
            assert all(v in ("ENOENT", "EBADF") for v in found["fds"].values() if not isinstance(v, list)), found
            assert set(found["opens"].values()) == {"ENOENT"}, found["opens"]
            assert found["mounts"] == {"cgroup": "EPERM", "cgroup2": "EPERM", "sysfs": "EPERM"}, found["mounts"]
            assert found["raise RLIMIT_AS"] in ("ValueError", "PermissionError"), found["raise RLIMIT_AS"]
            handle.kill_and_wait()
            handle.close()
        for directory in paths:
            with open(f"{directory}/memory.limit_in_bytes") as f:
                assert int(f.read()) == 300 << 20
    finally:
        for handle in handles:
            handle.kill_and_wait()
            handle.close()


# ---------------------------------------------------------------------------------------------
# one real API server and a private database and Redis namespace (sections 3 and 4)


STEP_LIMIT_S = 5


@pytest.fixture(scope="module")
def stack():
    with workflows.private_stack(workers=1, worker_concurrency=2, beat=False, lease_ttl_ms=3000,
                                 extra_env={"TAKOHOST_STEP_TIMEOUT_SECONDS": str(STEP_LIMIT_S)}) as s:
        yield s


# ---------------------------------------------------------------------------------------------
# 3. cron deliveries: a hanging handler with a detached descendant, stopped and proven stopped

STUBBORN = """
import os, signal, time
def scheduled(event, env, ctx):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        fd = os.open(env.OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        n = 0
        while True:
            n += 1
            os.write(fd, f"{n} {time.monotonic_ns()}\\n".encode())
            time.sleep(0.0002)
    os.waitpid(first, 0)
    while True:  # the handler hangs, whatever it is told
        try:
            time.sleep(3600)
        except BaseException:
            pass
"""


def _stamps(path) -> list[int]:
    with open(path) as f:
        return [int(line.split()[1]) for line in f.read().splitlines() if len(line.split()) == 2]


def _stubborn_match(stack, out, minute: str, source: str = STUBBORN) -> tuple[int, str]:
    from tests.integration.test_cron_support import at, create_stack, decide

    cron = create_stack(stack.db_url, space=stack.space, cron="*/5 * * * *", source=source,
                        variables={"OUT": str(out)}, now=at(minute) - dt.timedelta(seconds=30))
    [(match_pk, _)] = decide(stack.db_url, now=at(minute) + dt.timedelta(milliseconds=100),
                             triggers=[cron.trigger_uid])
    return match_pk, cron.trigger_uid


def _when_writing(out, action) -> threading.Thread:
    """Run ``action()`` in a thread once the descendant has written a few hundred bytes."""

    def run() -> None:
        workflows.wait_until(lambda: out.exists() and out.stat().st_size > 500, timeout=30, interval=0.01,
                             message="the descendant writing")
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _assert_proven_stopped(out, returned_ns: int) -> None:
    size = out.stat().st_size
    stamps = _stamps(out)
    assert len(stamps) > 20, "the descendant never ran"
    assert max(stamps) < returned_ns, "a line was written after deliver returned"
    time.sleep(0.5)
    assert out.stat().st_size == size, "the detached descendant still writes"


STUBBORN_WORKFLOW = """
import os, signal, time
class Stubborn:
    def __init__(self, env): pass
    def run(self, event, step):
        path = event["params"]["file"]
        def effect():
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM):
                signal.signal(sig, signal.SIG_IGN)
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
            while True:
                try:
                    time.sleep(3600)
                except BaseException:
                    pass
        return step.do("hang", effect, {"maxAttempts": 1})
"""


@pytest.fixture(scope="module")
def stubborn(stack):
    deployed = workflows.deploy(stack.db_url, space=stack.space, source=STUBBORN_WORKFLOW, class_name="Stubborn")
    http_instances = stack.instances(deployed.workflow)
    http_instances.workflow = deployed.workflow  # type: ignore[attr-defined]
    return http_instances


def test_a_replay_context_whose_effect_hangs_is_stopped_before_terminate_answers(stack, stubborn, shared):
    """AR-terminate on the shared heartbeat and session: the fence kills the context, and the
    API answers only after the stop is proven — no line is stamped after its answer."""
    out = shared / "terminate.log"
    code, body = stubborn.call("POST", body={"id": "terminated-one", "params": {"file": str(out)}})
    assert code == 201, body
    workflows.wait_until(lambda: out.exists() and out.stat().st_size > 500, timeout=60, interval=0.02,
                         message="the descendant writing")
    code, body = stubborn.call("POST", "/terminated-one/terminate", body={})
    answered = time.monotonic_ns()
    assert code in (200, 202), body
    _assert_proven_stopped(out, answered)
    assert stubborn.status("terminated-one")["status"] == "terminated"


def test_a_replay_context_whose_lease_another_owner_takes_is_stopped_within_a_lease_ttl(stack, stubborn, shared):
    """The instance's lease is taken over (as by another worker after a partition): the one
    heartbeat sees it lost, kills the context and everything it started within a lease TTL, never
    touches the new owner's lease, and commits nothing for the instance."""
    out = shared / "replay-lease.log"
    code, body = stubborn.call("POST", body={"id": "lost-one", "params": {"file": str(out)}})
    assert code == 201, body
    workflows.wait_until(lambda: out.exists() and out.stat().st_size > 500, timeout=60, interval=0.02,
                         message="the descendant writing")
    pk = workflows.instance_row(stack.db_url, workflow=stubborn.workflow, instance_id="lost-one").pk
    client = redis_client.client(config.load_settings().redis_url)
    key = redis_keys.lease_key(stack.namespace, pk)
    assert client.get(key) is not None
    other = f"other-worker:{uuid.uuid4().hex}"
    client.set(key, other, px=60_000)
    taken = time.monotonic_ns()
    try:
        def quiet() -> bool:
            before = out.stat().st_size
            time.sleep(0.3)
            return out.stat().st_size == before

        workflows.wait_until(quiet, timeout=15, interval=0.01, message="the descendant to stop")
        stamps = _stamps(out)
        assert (max(stamps) - taken) / 1e9 < 3.0, "stopped later than a lease TTL after the takeover"
        # stopped for the lost lease, well before the attempt time limit would have stopped it
        assert (max(stamps) - min(stamps)) / 1e9 < STEP_LIMIT_S - 1.5, (max(stamps) - min(stamps)) / 1e9
        _assert_proven_stopped(out, time.monotonic_ns())
        assert client.get(key) == other.encode(), "the worker released or overwrote the new owner's lease"
        assert stubborn.status("lost-one")["status"] == "running"
    finally:
        client.delete(key)


def test_a_replay_context_whose_effect_hangs_is_stopped_at_the_attempt_time_limit(stack, stubborn, shared):
    out = shared / "step-limit.log"
    code, body = stubborn.call("POST", body={"id": "timed-out-one", "params": {"file": str(out)}})
    assert code == 201, body
    final = workflows.wait_until(
        lambda: (st := stubborn.status("timed-out-one"))["status"] in ("errored", "complete", "terminated") and st,
        timeout=STEP_LIMIT_S + 60, interval=0.02, message="the attempt over its limit")
    seen = time.monotonic_ns()
    _assert_proven_stopped(out, seen)
    assert final["status"] == "errored" and "StepTimeout" in final["error"]["message"], final


def test_a_stubborn_handler_is_stopped_at_its_time_limit(stack, zygote, shared):
    from tests.integration.test_cron_support import deliveries_of
    from workers import cron_tasks

    out = shared / "limit.log"
    match_pk, _ = _stubborn_match(stack, out, "2031-03-01T10:05:00Z")
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=2.0)
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "failed"
    _assert_proven_stopped(out, time.monotonic_ns())
    [delivery] = deliveries_of(stack.db_url, match_pk)
    assert (delivery.outcome, delivery.error) == ("failed", "the scheduled handler did not finish within 2 s; it was stopped")
    client = redis_client.client(settings.redis_url)
    assert client.exists(redis_keys.delivery_lease_key(settings.namespace, match_pk)) == 0


def test_a_handler_that_exits_leaving_its_descendant_is_a_failed_run_with_the_descendant_dead(stack, zygote, shared):
    """The handler (PID 1 of its context) exits at once once its detached writer runs: the run
    fails, and the writer — left to the kernel's tear-down of the namespace — is already dead
    when deliver returns."""
    from tests.integration.test_cron_support import deliveries_of
    from workers import cron_tasks

    out = shared / "exit.log"
    exiting = STUBBORN.replace("    while True:  # the handler hangs", "    while not os.path.exists(env.OUT) or os.path.getsize(env.OUT) < 2000:\n"
                               "        time.sleep(0.001)\n    os._exit(0)\n    while True:  # the handler hangs")
    assert "os._exit(0)\n    while True:  # the handler hangs" in exiting
    match_pk, _ = _stubborn_match(stack, out, "2031-03-01T10:20:00Z", source=exiting)
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=60.0)
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "failed"
    _assert_proven_stopped(out, time.monotonic_ns())
    [delivery] = deliveries_of(stack.db_url, match_pk)
    assert delivery.outcome == "failed" and "exited without a result" in delivery.error, delivery.error


def test_a_stubborn_handler_is_stopped_when_its_trigger_is_deleted(stack, zygote, shared):
    from services import cron_runs
    from tests.integration.test_cron_support import deliveries_of
    from workers import cron_tasks

    out = shared / "delete.log"
    match_pk, trigger_uid = _stubborn_match(stack, out, "2031-03-01T10:10:00Z")
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=60.0)

    def delete() -> None:
        with models_db.session_scope(stack.db_url) as session:
            session.get(res_models.Resource, trigger_uid).phase = "deleting"  # a DELETE was accepted

    thread = _when_writing(out, delete)
    started = time.monotonic()
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "failed"
    _assert_proven_stopped(out, time.monotonic_ns())
    thread.join(1)
    assert time.monotonic() - started < 20
    [delivery] = deliveries_of(stack.db_url, match_pk)
    assert (delivery.outcome, delivery.error) == ("failed", cron_runs.STOPPED_BY_DELETE)
    assert cron_tasks.deliveries_stopped(trigger_uid, now=dt.datetime.now(dt.UTC), settings=settings)


def test_a_stubborn_handler_is_stopped_when_another_owner_takes_its_lease(stack, zygote, shared):
    """The lease is taken over (as by another worker after a partition): the heartbeat sees it
    lost and the handler, its ignored signals and its detached descendant stop within a beat;
    deliver leaves the new owner's lease alone."""
    from tests.integration.test_cron_support import deliveries_of, matches_of
    from workers import cron_tasks

    out = shared / "lease.log"
    match_pk, trigger_uid = _stubborn_match(stack, out, "2031-03-01T10:15:00Z")
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=60.0)
    client = redis_client.client(settings.redis_url)
    key = redis_keys.delivery_lease_key(settings.namespace, match_pk)
    other = f"other-worker:{uuid.uuid4().hex}"
    taken: list[int] = []

    def take_over() -> None:
        assert client.get(key) is not None
        client.set(key, other, px=60_000)
        taken.append(time.monotonic_ns())

    thread = _when_writing(out, take_over)
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "error"
    _assert_proven_stopped(out, time.monotonic_ns())
    thread.join(1)
    assert taken, "the lease was never taken over"
    assert (max(_stamps(out)) - taken[0]) / 1e9 < settings.lease_ttl_ms / 1000, "stopped later than a lease TTL"
    assert client.get(key) == other.encode(), "deliver released or overwrote the new owner's lease"
    [delivery] = deliveries_of(stack.db_url, match_pk)
    assert delivery.outcome == "unknown", delivery.outcome
    assert [m.state for m in matches_of(stack.db_url, trigger_uid)] == ["pending"]
    client.delete(key)


# ---------------------------------------------------------------------------------------------
# 4. path tricks on the instance routes, with Space A's token against Space B's ids

WORKFLOW = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.wait_for_event("never", {"type": "never", "timeoutSeconds": 3600})
"""


@pytest.fixture(scope="module")
def two_spaces(stack):
    """Space A (the stack's) and Space B, each with a workflow; B has one instance."""
    b_space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        b_token = tokens.create_token_txn(session, space=b_space)
    a_wf = workflows.deploy(stack.db_url, space=stack.space, source=WORKFLOW, class_name="W").workflow
    b_wf = workflows.deploy(stack.db_url, space=b_space, source=WORKFLOW, class_name="W").workflow
    b = workflows.HttpInstances(stack.api_url, b_token, b_space, b_wf)
    b_id = f"victim-{uuid.uuid4().hex[:8]}"
    code, body = b.call("POST", body={"id": b_id, "params": {"secret": "B-SECRET"}})
    assert code == 201, body
    a = workflows.HttpInstances(stack.api_url, stack.token, stack.space, a_wf)
    code, body = a.call("POST", body={"id": "mine", "params": {}})
    assert code == 201, body
    return {"A": stack.space, "B": b_space, "wa": a_wf, "wb": b_wf, "ib": b_id, "a": a, "b": b}


def _raw(stack, method: str, target: str, token: str, body: bytes | None = None,
         extra: dict | None = None) -> tuple[int, bytes, str]:
    """One request with the request target sent byte for byte."""
    host, port = stack.api_url.rsplit("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", **(extra or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body or b""))}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("Content-Type") or ""
    finally:
        conn.close()


def _tricks(s: dict, port: int) -> list[str]:
    A, B, wa, wb, ib = s["A"], s["B"], s["wa"], s["wb"], s["ib"]
    b_path = f"{B}/resources/{wb}/instances/{ib}"
    a_prefix = f"/v2/spaces/{A}/resources/{wa}/instances"
    up = "../../../../"
    targets = [
        f"/v2/spaces/{b_path}",  # B's own path: the token is A's
        f"/v2/spaces/{A}/resources/{wb}/instances/{ib}",  # A's Space, B's workflow
        f"/v2/spaces/{A}/resources/{wb}/instances/{ib}/",
        f"/v2/spaces/{b_path}/",
        f"/v2/spaces/{A}//resources/{wb}/instances/{ib}",
        f"/v2/spaces//{b_path}",
        f"{a_prefix}/{up}{b_path}",
        f"{a_prefix}/{up.replace('/', '%2F')}{b_path.replace('/', '%2F')}",
        f"{a_prefix}/{up.replace('/', '%2f')}{b_path.replace('/', '%2f')}",
        f"{a_prefix}/{up.replace('/', '%252F')}{b_path.replace('/', '%252F')}",
        f"{a_prefix}/{up.replace('.', '%2E').replace('/', '%2F')}{b_path.replace('/', '%2F')}",
        f"{a_prefix}/{up.replace('.', '%2e')}{b_path}",
        f"{a_prefix}/{up.replace('.', '%252E')}{b_path}",
        f"{a_prefix}/{up.replace('../', '%C0%AE%C0%AE%C0%AF')}{b_path.replace('/', '%C0%AF')}",
        f"{a_prefix}/{up.replace('../', '%E0%80%AE%E0%80%AE%E0%80%AF')}{b_path}",
        f"{a_prefix}/{up.replace('/', '%5C')}{b_path.replace('/', '%5C')}",
        f"/v2/spaces/{A}/../{b_path}",
        f"/v2/spaces/{A}/%2E%2E/{b_path}",
        f"/v2/spaces/{A}%2F..%2F{b_path}",
        f"/v2/spaces/{A}%2F%2E%2E%2F{B}/resources/{wb}/instances/{ib}",
        f"/v2/spaces/{A}%00/resources/{wb}/instances/{ib}",
        f"/v2/spaces/{A}%00{B}/resources/{wb}/instances/{ib}",
        f"/v2/spaces/{A}/resources/{wb}%00/instances/{ib}",
        f"/v2/spaces/{A}/resources/{wa}%00{wb}/instances/{ib}",
        f"/v2/spaces/{A}/resources/{wb}/instances/{ib}%00",
        f"/v2/spaces/{''.join(f'%{c:02X}' for c in B.encode())}/resources/{wb}/instances/{ib}",
        f"/v2/spaces/{A}/resources/{''.join(f'%{c:02x}' for c in wb.encode())}/instances/{ib}",
        f"/V2/SPACES/{b_path}",
        f"/v2/spaces/{A};/../{b_path}",
        f"{a_prefix}/x?/../../{b_path}",
        f"{a_prefix}/x#/{up}{b_path}",
        f"http://127.0.0.1:{port}/v2/spaces/{b_path}",
        f"http://127.0.0.1:{port}/v2/spaces/{A}/resources/{wb}/instances/{ib}",
        f"http://127.0.0.1:{port}{a_prefix}/{up}{b_path}",
        f"http://{A}@127.0.0.1:{port}/v2/spaces/{b_path}",
        f"//127.0.0.1:{port}/v2/spaces/{b_path}",
    ]
    return targets


REFUSED = {400, 401, 403, 404, 405}


def test_space_a_reaches_no_instance_of_space_b_through_path_tricks(stack, two_spaces):
    s = two_spaces
    port = int(stack.api_url.rsplit(":", 1)[1])
    token = stack.token
    # the controls: B's token reaches its instance by the plain path; A's own instance is reachable
    code, _ = s["b"].call("GET", "/" + s["ib"])
    assert code == 200
    assert s["a"].call("GET", "/mine")[0] == 200
    # the same spellings reach A's own instance: the refusals below are the Space check's, not
    # requests the server could not route
    A, wa = s["A"], s["wa"]
    for target in (f"http://127.0.0.1:{port}/v2/spaces/{A}/resources/{wa}/instances/mine",
                   f"/v2/spaces/{''.join(f'%{c:02X}' for c in A.encode())}/resources/{wa}/instances/mine",
                   f"/v2/spaces/{A}/resources/{''.join(f'%{c:02x}' for c in wa.encode())}/instances/%6D%69ne"):
        code, body, _ = _raw(stack, "GET", target, token)
        assert code == 200 and b'"mine"' in body, (target, code, body[:300])
    answered = {}
    for target in _tricks(s, port):
        for suffix in ("", "/events", "/history", "/logs", "/progress"):
            path, _, query = target.partition("?")
            full = path + suffix + (f"?{query}" if query else "")
            for method in ("GET", "HEAD", "OPTIONS"):
                code, body, kind = _raw(stack, method, full, token)
                answered[(method, full)] = code
                assert code in REFUSED, (method, full, code, body[:300])
                if body:
                    assert kind.startswith("application/json"), (method, full, kind, body[:200])
                assert b"B-SECRET" not in body and b'"status"' not in body, (method, full, body[:300])
        for action, payload in (("/events", {"type": "never", "payload": {"x": 1}}), ("/terminate", {})):
            path = target.partition("?")[0].partition("#")[0] + action
            code, body, _ = _raw(stack, "POST", path, token, json.dumps(payload).encode())
            assert code in REFUSED, ("POST", path, code, body[:300])
    assert len(answered) > 300
    # headers some servers and proxies rewrite the path by (gunicorn once took SCRIPT_NAME from one)
    A, B, wb, ib = s["A"], s["B"], s["wb"], s["ib"]
    b_target = f"/v2/spaces/{B}/resources/{wb}/instances/{ib}"
    for name, value, target in (
        ("SCRIPT_NAME", f"/v2/spaces/{A}", f"/v2/spaces/{A}{b_target}"),
        ("SCRIPT-NAME", f"/v2/spaces/{A}", f"/v2/spaces/{A}{b_target}"),
        ("X-Original-URL", b_target, f"/v2/spaces/{A}/resources/{s['wa']}/instances/mine"),
        ("X-Rewrite-URL", b_target, f"/v2/spaces/{A}/resources/{s['wa']}/instances/mine"),
        ("X-Forwarded-Prefix", f"/v2/spaces/{A}", b_target),
    ):
        host, port_text = stack.api_url.rsplit("//", 1)[1].split(":")
        conn = http.client.HTTPConnection(host, int(port_text), timeout=30)
        try:
            conn.putrequest("GET", target)
            conn.putheader("Authorization", f"Bearer {token}")
            conn.putheader(name, value)
            conn.endheaders()
            response = conn.getresponse()
            code, body = response.status, response.read()
        finally:
            conn.close()
        assert code in REFUSED or b'"mine"' in body, (name, target, code, body[:300])
        assert ib.encode() not in body or code in REFUSED, (name, target, code, body[:300])
    # B's instance is untouched: not terminated, no event in its inbox
    code, status = s["b"].call("GET", "/" + s["ib"])
    assert code == 200 and status["status"] not in ("terminated", "complete", "errored"), status
    code, inbox = s["b"].call("GET", f"/{s['ib']}/events")
    assert code == 200 and "never" not in json.dumps(inbox), inbox


def test_space_a_reaches_no_resource_of_space_b_through_path_tricks(stack, two_spaces):
    s = two_spaces
    A, B, wb = s["A"], s["B"], s["wb"]
    token = stack.token
    targets = [
        f"/v2/spaces/{B}/resources/{wb}",
        f"/v2/spaces/{A}/resources/{wb}",
        f"/v2/spaces/{A}/resources/{wb}/",
        f"/v2/spaces/{A}/resources/..%2F..%2F{B}%2Fresources%2F{wb}",
        f"/v2/spaces/{A}/resources/..%252F..%252F{B}%252Fresources%252F{wb}",
        f"/v2/spaces/{A}/resources/%2E%2E/%2E%2E/{B}/resources/{wb}",
        f"/v2/spaces/{A}/../{B}/resources/{wb}",
        f"/v2/spaces/{A}%2F..%2F{B}/resources/{wb}",
        f"/v2/spaces/{A}%00/resources/{wb}",
        f"/v2/spaces/{A}/resources/{wb}%00",
        f"/v2/spaces/{A}/resources/{wb}/runs",
        f"/v2/spaces/{A}/resources/{wb}/instances",
        f"/v2/spaces/{A}/resources/{wb}%2Finstances",
        f"/v2/spaces/{A}/resources/{wb}/instances/",
        f"/v2/spaces/{B}/resources/{wb}/instances",
        f"/v2/spaces/{B}/resources",
        f"/v2/spaces/{B}/usage",
        f"/v2/spaces/{A}%2F..%2F{B}/usage",
        f"/v2/spaces/{A}/resources/{wb}/check",
    ]
    for target in targets:
        for method in ("GET", "HEAD", "OPTIONS", "DELETE"):
            code, body, _ = _raw(stack, method, target, token)
            assert code in REFUSED, (method, target, code, body[:300])
            assert b'"spec"' not in body and b'"className"' not in body, (method, target, body[:300])
        code, body, _ = _raw(stack, "PUT", target, token, b'{"spec": {}}')
        assert code in REFUSED | {409, 422}, ("PUT", target, code, body[:300])
        code, body, _ = _raw(stack, "POST", target, token, b'{"id": "x"}')
        assert code in REFUSED, ("POST", target, code, body[:300])
    code, body, _ = _raw(stack, "GET", f"/v2/spaces/{A}/resources", token)
    assert code == 200 and wb.encode() not in body and B.encode() not in body, body[:300]
    code, listed = s["b"].call("GET")
    assert code == 200 and s["ib"] in json.dumps(listed), listed


def test_an_idempotency_key_of_space_b_replays_nothing_to_space_a(stack, two_spaces):
    """Idempotency records are per Space: A reusing B's key (and the very same request path and
    body but for the Space) gets its own answer, never B's recorded one."""
    s = two_spaces
    key = f"shared-{uuid.uuid4().hex}"
    code, body = s["b"].call("POST", body={"id": "idem", "params": {"who": "B"}}, headers={"Idempotency-Key": key})
    assert code == 201, body
    code, body = s["a"].call("POST", body={"id": "idem", "params": {"who": "B"}}, headers={"Idempotency-Key": key})
    assert code == 201 and body["id"] == "idem", body
    code, body = s["a"].call("GET", "/idem")
    assert code == 200, body
    a_row = workflows.instance_row(stack.db_url, workflow=s["wa"], instance_id="idem")
    b_row = workflows.instance_row(stack.db_url, workflow=s["wb"], instance_id="idem")
    assert a_row is not None and b_row is not None and a_row.pk != b_row.pk


# ---------------------------------------------------------------------------------------------
# 2b. cgroup v2: the freezer cgroup and the memory cgroup are in the same hierarchy


def _cgroup2_mount() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                return fields[4]
    raise AssertionError("this machine mounts no cgroup2 hierarchy")


def test_on_cgroup_v2_a_context_stays_in_its_memory_cgroup_and_its_freezer_freezes_it(tmp_path):
    """On a cgroup v2 host (a delegated subtree with ``memory`` enabled) the zygote found its
    memory cgroups and its freezer cgroups in the one v2 hierarchy, and a process is in exactly
    one cgroup of a hierarchy: the child joined its memory ``ctx-<n>`` and then its freezer
    ``ctx-<n>``, which took it out of its memory cgroup — no memory limit for the context's
    processes together, only ``RLIMIT_AS`` per process (64 × 1 GiB). A real ``Forker`` on this
    machine's cgroup2 mount, where only the memory controller is missing (it is v1's here: no
    limit files to write): the child must end up in its memory cgroup, and the freezer descriptor
    the host stops it by must freeze that same cgroup."""
    from takohost.runtime.isolation import cgroups, forking, mounts
    from takohost.runtime.isolation import policy as policy_module

    if os.geteuid() != 0:
        pytest.fail("this attack needs a root host (per-context cgroups)")
    base = os.path.join(_cgroup2_mount(), f"takohost-attack-{uuid.uuid4().hex[:8]}")
    root = tmp_path / "root"
    root.mkdir()
    report = tmp_path / "report.json"

    def memory_find(policy):
        os.makedirs(f"{base}/memory", exist_ok=True)
        memory = cgroups.MemoryCgroup(f"{base}/memory", version=2, limit_bytes=policy.memory_mb << 20)
        memory.settings = ()  # (this machine's v2 hierarchy has no memory controller to limit)
        return memory

    def freezer_find():
        os.makedirs(f"{base}/freezer", exist_ok=True)
        return cgroups.Freezer(f"{base}/freezer", version=2)

    def check() -> dict:
        cgroups.MemoryCgroup.find = classmethod(lambda cls, policy: memory_find(policy))  # type: ignore[method-assign]
        cgroups.Freezer.find = classmethod(lambda cls: freezer_find())  # type: ignore[method-assign]
        layout = mounts.Layout.compute(policy_module.Policy())
        forker = forking.Forker(layout, root=str(root))
        ready_r, ready_w = os.pipe()
        child = forker.fork()
        if child == 0:
            try:
                os.close(ready_r)
                forker.enter()
                os.write(ready_w, b"x")
                time.sleep(30)
            finally:
                os._exit(0)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"x"
        with open(f"/proc/{child}/cgroup") as f:
            [member] = [line.rstrip("\n").split(":", 2)[2] for line in f if line.startswith("0::")]
        found = {"member": os.path.join(_cgroup2_mount(), member.lstrip("/")),
                 "memory": forker.memory_of.get(child, "")}
        fd = forker.freezer_fd(child)
        found["frozen"] = fd >= 0 and cgroups.freeze(fd, timeout=2.0)
        if fd >= 0:
            found["freezer is memory"] = os.fstat(fd).st_ino == os.stat(found["memory"]).st_ino
            with open(f"/proc/{child}/stat") as f:
                found["state"] = f.read().rsplit(")", 1)[1].split()[0]
            cgroups.kill_frozen(fd)
            cgroups.thaw(fd)
        os.kill(child, 9)
        os.waitpid(child, 0)
        forker.release(child)
        forker.close()
        return found

    pid = os.fork()
    if pid == 0:
        try:
            report.write_text(json.dumps(check()))
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            report.write_text(json.dumps({"error": repr(exc)}))
            os._exit(1)
    try:
        _, status = os.waitpid(pid, 0)
        found = json.loads(report.read_text())
        assert os.waitstatus_to_exitcode(status) == 0, found
        assert found["memory"] and found["member"] == found["memory"], f"the context left its memory cgroup: {found}"
        assert found["frozen"] and found["freezer is memory"] and found["state"] in ("S", "D", "T"), found
    finally:
        for directory in (f"{base}/memory", f"{base}/freezer", base):
            for name in os.listdir(directory) if os.path.isdir(directory) else ():
                if name.startswith(("ctx-", "takohost-")):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(directory, name))
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        assert not os.path.exists(base), os.listdir(base)


def test_space_a_reaches_no_operation_or_cron_run_of_space_b(stack, two_spaces):
    """The routes beside the instance tree (matched on the decoded path): B's Operation and its
    cron trigger's runs, with A's token, by plain and tricked paths; B's token is the control."""
    from tests.integration.test_cron_support import create_stack

    s = two_spaces
    A, B = s["A"], s["B"]
    body = json.dumps({"form": workflows.FORM.format(f"ModuleWorker/{workflows.FORM_VERSIONS['ModuleWorker']}"),
                       "name": f"r{uuid.uuid4().hex[:12]}", "spec": {}}).encode()
    code, answer, _ = _raw(stack, "POST", f"/v2/spaces/{B}/resources", s["b"].token, body,
                           {"Idempotency-Key": uuid.uuid4().hex})
    assert code == 202, answer
    op = json.loads(answer)["id"]
    trigger = create_stack(stack.db_url, space=B, cron="*/5 * * * *").trigger_uid
    controls = [f"/v2/spaces/{B}/operations/{op}", f"/v2/spaces/{B}/resources/{trigger}/runs"]
    for target in controls:
        code, answer, _ = _raw(stack, "GET", target, s["b"].token)
        assert code == 200, (target, answer[:300])
    targets = []
    for own in controls:
        rest = own.split(f"/v2/spaces/{B}/", 1)[1]
        targets += [
            own,
            f"/v2/spaces/{A}/{rest}",
            f"/v2/spaces/{A}/{rest}/",
            f"/v2/spaces/{A}/../{B}/{rest}",
            f"/v2/spaces/{A}/%2E%2E/{B}/{rest}",
            f"/v2/spaces/{A}%2F..%2F{B}/{rest}",
            f"/v2/spaces/{A}/resources/..%2F..%2F{B}%2F{rest.replace('/', '%2F')}",
            f"/v2/spaces/{A}%00/{rest}",
            f"/v2/spaces/{''.join(f'%{c:02X}' for c in B.encode())}/{rest}",
        ]
    targets.append(f"/v2/spaces/{A}/resources/{trigger}/runs/2031-03-01T10:05:00Z/logs")
    for target in targets:
        for method in ("GET", "HEAD", "OPTIONS"):
            code, answer, _ = _raw(stack, method, target, stack.token)
            assert code in REFUSED, (method, target, code, answer[:300])
            assert b'"state"' not in answer and b'"runs"' not in answer, (method, target, answer[:300])
