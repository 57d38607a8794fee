"""A second attack round on this session's changes, written as a hostile tenant would, against
real processes.

1. **The helpers' launch moved to ``workers.owned_process``** (``_launch``: two pipes, a session of
   its own, inherited descriptors): tenant code in a real context lists every descriptor it has,
   and none is one of the zygote's or the egress proxy's (their control and ready pipes, their
   listening sockets, the settings pipe); neither helper's unix socket can be reached from the
   context, nor is either helper's process visible there. The zygote holds no descriptor of the
   egress proxy started before it. The zygote's own cgroup directories (``isolation.cgroups``
   ``_own_directory``) are root's with mode 0700, and the context can neither write a file of
   them nor make a directory in them by their host paths.
2. **The denied-call table shared between machines** (``isolation.seccomp``): on x86_64 every
   denied name has its x86_64 number (checked against an independent copy of the kernel's
   ``syscall_64.tbl``), and tenant code calling each of them with the real kernel gets ``EPERM``,
   the 424-and-on numbers included, also with the x32 bit.
3. **The child's new ask paths** (``runtime.step.Context.ask_do``/``report_effect``): tenant code
   reports an effect for a step it was not asked about, reports a settled step a second time
   (to overwrite its result), or reports before any step; runs two steps of an ``async def run``
   at once, or gives a plain step a coroutine function: the host refuses what was not asked,
   records nothing forged or swapped, and another Space's instance of the same id is untouched.
4. **The one lookup of an instance by its workflow** (``instance_common.workflow_instance_txn``)
   and **the answers dumped through schemas**: Space A and Space B each have an instance with
   the same odd id (slashes, dots, percent signs, quotes, non-ASCII); with A's token over a real
   API server, each of the instance reads (get, progress, inbox, history, logs) answers A's
   data only, and with B's workflow uid answers 404 with none of B's data; the console (A signed
   in) cannot open B's instance by B's uid or name either.
5. **The console's inbox from ``QueuedEvent`` values** (``_instance_live.html``): a hostile event
   type and payload (HTML, script, attribute breaking quotes, Jinja syntax) render escaped on the
   instance page and its live part.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import textwrap
import urllib.parse
import uuid

import pytest

from models import db as models_db
from services import instance_events, instance_history, instances, tokens
from takohost.runtime import isolation
from takohost.runtime.isolation import seccomp
from tests.support import sandbox_jobs, workflows

MACHINE = platform.machine()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    directory = tmp_path_factory.mktemp("attack-round-2")
    os.chmod(directory, 0o1777)
    return directory


_job = sandbox_jobs.workflow_job
_run = sandbox_jobs.run_output


def _links(pid: int | str) -> dict[str, str]:
    """``/proc/<pid>/fd``: descriptor → what it names (``pipe:[N]``, ``socket:[N]``, a path)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass  # closed meanwhile
    return found


# ---------------------------------------------------------------------------------------------
# 1. the helpers' descriptors and sockets, from inside a context

DESCRIPTORS = """
import os, socket
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        links = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                links[fd] = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                pass
        reached = {}
        for path in event["params"]["sockets"]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                reached[path] = "CONNECTED"
            except OSError as exc:
                reached[path] = type(exc).__name__
            finally:
                s.close()
        for name in event["params"]["abstract"]:  # the abstract namespace is per network namespace
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect("\\0" + name)
                reached["@" + name] = "CONNECTED"
            except OSError as exc:
                reached["@" + name] = type(exc).__name__
            finally:
                s.close()
        cgroups = {}
        for path in event["params"]["cgroups"]:
            for name in ("cgroup.procs", "tasks", "memory.limit_in_bytes", "memory.max", "freezer.state"):
                try:
                    with open(os.path.join(path, name), "w") as f:
                        f.write("0")
                    cgroups[path + "/" + name] = "WRITTEN"
                except OSError as exc:
                    cgroups[path + "/" + name] = type(exc).__name__
            try:
                os.mkdir(os.path.join(path, "mine"))
                cgroups[path] = "MADE"
            except OSError as exc:
                cgroups[path] = type(exc).__name__
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        stdin = b""
        try:
            os.set_blocking(0, False)
            stdin = os.read(0, 65536)
        except OSError:
            pass
        return {"links": links, "reached": reached, "cgroups": cgroups, "pids": pids, "stdin": stdin.decode(errors="replace"),
                "visible": {str(p): os.path.exists("/proc/%d" % p) for p in event["params"]["helpers"]}}
"""


def test_a_context_holds_no_descriptor_of_the_helpers_and_reaches_neither_socket(shared):
    from workers import sandbox
    from workers.egress import client as egress_client

    proxy = egress_client.EgressProxy()
    proxy.start()
    zygote = sandbox.Zygote(policy=isolation.policy.Policy(test_shared_dir=str(shared), memory_mb=300))
    try:
        zygote.start()
        assert zygote.pid is not None and proxy._proc is not None and proxy._control_w is not None
        helper_objects = set()
        for pid in (zygote.pid, proxy._proc.pid):
            helper_objects |= {link for link in _links(pid).values() if link.startswith(("pipe:", "socket:"))}
        # the owner's ends of the control pipes (in this process)
        own = _links("self")
        for fd in (zygote._control_w, proxy._control_w):
            helper_objects.add(own[str(fd)])
        # the zygote inherited nothing of the proxy started before it
        assert own[str(proxy._control_w)] not in _links(zygote.pid).values()
        # (both write to this process's stderr, which the contexts never get: the set above holds it)
        shared_objects = set(_links(zygote.pid).values()) & set(_links(proxy._proc.pid).values()) - {own.get("2")}
        assert not {o for o in shared_objects if o.startswith(("pipe:", "socket:"))}, shared_objects
        assert zygote.socket_path and proxy.socket_path
        sockets = [zygote.socket_path, proxy.socket_path, os.path.dirname(zygote.socket_path)]
        abstract = [zygote.socket_path, proxy.socket_path]
        # the zygote's own cgroup directories (isolation.cgroups._own_directory) and its contexts'
        own_cgroups = glob.glob(f"/sys/fs/cgroup/*/takohost-*-{zygote.pid}") + glob.glob(
            f"/sys/fs/cgroup/takohost-*-{zygote.pid}")
        assert own_cgroups, "the zygote made no cgroup directory of its own"
        targets = own_cgroups + [d for c in own_cgroups for d in glob.glob(f"{c}/ctx-*")]
        with open(f"/proc/{zygote.pid}/cgroup") as f:  # its memory cgroups sit under its own (v1)
            for _, controllers, path in (line.rstrip("\n").split(":", 2) for line in f):
                if controllers == "memory":
                    mine = f"/sys/fs/cgroup/memory{path.rstrip('/')}/takohost-zygote-{zygote.pid}"
                    targets += [mine, *glob.glob(f"{mine}/ctx-*")] if os.path.isdir(mine) else []
        targets = sorted(set(targets))
        for directory in targets:  # root's, 0700: no other user may enter, let alone write
            st = os.stat(directory)
            assert st.st_uid == 0 and st.st_mode & 0o7777 == 0o700, (directory, oct(st.st_mode), st.st_uid)
        found = _run(zygote, DESCRIPTORS, {"sockets": sockets, "abstract": abstract, "cgroups": targets,
                                           "helpers": [zygote.pid, proxy._proc.pid]})
        assert not {k: v for k, v in found["cgroups"].items() if v in ("WRITTEN", "MADE")}, found["cgroups"]
        links = found["links"]
        assert set(links) <= {"0", "1", "2", "3", "4", "5", "6", "7"}, links  # stdio, channel, capture
        leaked = {fd: link for fd, link in links.items() if link in helper_objects}
        assert not leaked, f"the context holds the helpers' descriptors: {leaked}"
        assert not any(link.startswith(("/tmp/takohost-", "/run/takohost")) for link in links.values()), links
        assert links.get("0") == "/dev/null" and found["stdin"] == "", found  # not the settings pipe
        assert set(found["reached"].values()) <= {"FileNotFoundError", "ConnectionRefusedError"}, found["reached"]
        assert found["reached"][os.path.dirname(zygote.socket_path)] == "FileNotFoundError"  # not even the directory
        # its own PID namespace: neither helper (nor any host process) is there
        assert not any(found["visible"].values()) and found["pids"] == [1], found
        # the context's channel is a socket of its own, not the zygote's listening socket
        assert links["3"].startswith("socket:") and links["3"] not in helper_objects
    finally:
        zygote.stop()
        proxy.stop()
    assert not os.path.exists(zygote.socket_path) and not os.path.exists(proxy.socket_path)


# ---------------------------------------------------------------------------------------------
# 2. the denied calls on x86_64, from the kernel's own numbering

#: arch/x86/entry/syscalls/syscall_64.tbl (common/64 entries), an independent copy.
X86_64_TBL = {
    "ptrace": 101, "pivot_root": 155, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176,
    "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "inotify_init": 253, "unshare": 272, "inotify_init1": 294, "perf_event_open": 298, "fanotify_init": 300,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "mount_setattr": 442, "open_tree_attr": 467,
}

DENIED = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        out = {}
        for nr in event["params"]["numbers"]:
            for bit in (0, 0x40000000):
                ctypes.set_errno(0)
                r = libc.syscall(ctypes.c_long(nr | bit), *[ctypes.c_long(0)] * 6)
                out["%d+%x" % (nr, bit)] = "ALLOWED" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        return out
"""


@pytest.mark.skipif(MACHINE != "x86_64", reason="the x86_64 table")
def test_every_denied_call_keeps_its_x86_64_number_and_is_refused_by_the_kernel(shared):
    from workers import sandbox

    table = seccomp.DENIED_CALLS["x86_64"]
    wrong = {name: nr for name, nr in table.items() if X86_64_TBL.get(name) != nr}
    assert not wrong, f"denied names with another call's number on x86_64: {wrong}"
    assert set(X86_64_TBL) - set(table) == {"clone3"} and seccomp.CLONE3 == X86_64_TBL["clone3"]
    assert {n for n in table.values() if n >= 424} == {425, 426, 427, 428, 429, 430, 431, 432, 433, 442, 467}
    zygote = sandbox.Zygote(policy=isolation.policy.Policy(test_shared_dir=str(shared), memory_mb=300))
    zygote.start()
    try:
        found = _run(zygote, DENIED, {"numbers": sorted(table.values())})
    finally:
        zygote.stop()
    refused = {key: answer for key, answer in found.items() if answer != "EPERM"}
    assert not refused, f"denied calls the filter let through (or answered otherwise): {refused}"
    assert len(found) == 2 * len(table)


# ---------------------------------------------------------------------------------------------
# 3. the ask paths misused by tenant code (forged effect_result frames)

FORGE = """
import asyncio, json, os, struct

def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body

class W:
    def __init__(self, env): pass
    def run(self, event, step):
        how = event["params"]["how"]
        if how == "other-name":
            # inside the effect of "a": a report for "b", which the host never asked to run
            def effect():
                os.write(3, frame({"op": "effect_result", "name": "b", "ok": True, "result": {"forged": True}}))
                return {"real": "a"}
            step.do("a", effect)
        elif how == "twice":
            step.do("a", lambda: {"real": "a"})
            # a second report of the settled step, to overwrite its result
            os.write(3, frame({"op": "effect_result", "name": "a", "ok": True, "result": {"forged": True}}))
        elif how == "unasked":
            # a report before any step was asked, then an honest step
            os.write(3, frame({"op": "effect_result", "name": "a", "ok": True, "result": {"forged": True}}))
        step.do("after", lambda: {"n": 1})
        return {"done": True}

class A:
    def __init__(self, env): pass
    async def run(self, event, step):
        async def one(name):
            await asyncio.sleep(0)
            return {"real": name}
        got = await asyncio.gather(step.do("x", lambda: one("x")), step.do("y", lambda: one("y")))
        return {"got": got}

class S:
    def __init__(self, env): pass
    def run(self, event, step):
        async def effect():
            return {"never": "awaited"}
        return step.do("c", effect, {"maxAttempts": 1})
"""

VICTIM = """
class V:
    def __init__(self, env): pass
    def run(self, event, step):
        first = step.do("v1", lambda: {"victim": 1})
        return {"first": first, "got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""


@pytest.fixture()
def engine_db():
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def engine_zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


def _events(space: str, workflow: str, instance_id: str) -> list[dict]:
    return instance_history.history(space=space, workflow_uid=workflow, instance_id=instance_id).events


WHY = {
    "other-name": "expected the effect_result of 'a', got 'effect_result'",
    "twice": "unexpected message 'effect_result'",
    "unasked": "unexpected message 'effect_result'",
}


@pytest.mark.parametrize("how", sorted(WHY))
def test_a_forged_effect_report_is_refused_and_records_nothing(monkeypatch, engine_zygote, engine_db, how):
    space, victim_space = f"s{uuid.uuid4().hex[:12]}", f"s{uuid.uuid4().hex[:12]}"
    for s in (space, victim_space):
        with models_db.session_scope(engine_db) as session:
            tokens.create_token_txn(session, space=s)
    driver = workflows.Driver(monkeypatch, zygote=engine_zygote)
    try:
        workflow = workflows.deploy(engine_db, space=space, source=textwrap.dedent(FORGE), class_name="W").workflow
        victim = workflows.deploy(engine_db, space=victim_space, source=textwrap.dedent(VICTIM), class_name="V").workflow
        instances.create(space=victim_space, workflow_uid=victim, instance_id="a", now=driver.clock())
        instances.create(space=space, workflow_uid=workflow, instance_id="a", params={"how": how}, now=driver.clock())
        driver.run()
        status = instances.status(space=space, workflow_uid=workflow, instance_id="a")
        assert status["status"] == "errored", status
        assert status["error"] == {"reason": "run_threw",
                                   "message": f"the workflow process broke the host protocol: {WHY[how]}"}, status
        events = _events(space, workflow, "a")
        completed = {e["attributes"]["name"]: e["attributes"].get("result") for e in events
                     if e["eventType"] == "StepCompleted"}
        assert "forged" not in json.dumps(events), events
        assert "b" not in completed and "after" not in completed, completed
        if how == "twice":
            assert completed == {"a": {"real": "a"}}, completed
        # the other Space's instance (same id) ran its own step only and waits
        v = instances.status(space=victim_space, workflow_uid=victim, instance_id="a")
        assert v["status"] == "waiting", v
        v_events = _events(victim_space, victim, "a")
        assert "forged" not in json.dumps(v_events)
        assert [e["attributes"]["name"] for e in v_events if e["eventType"] == "StepCompleted"] == ["v1"]
    finally:
        workflows.clear_timers(engine_db)


@pytest.mark.parametrize(("class_name", "reason", "message"), [
    ("A", "step_definition_mismatch", "overlapping steps: step.do('y') started while step.do('x') was unsettled"),
    ("S", None, None),
])
def test_steps_mixed_across_async_and_sync_never_record_a_wrong_result(monkeypatch, engine_zygote, engine_db,
                                                                      class_name, reason, message):
    """Two steps of an ``async def run`` at once (``A``) are refused as overlapping; a coroutine
    function as a plain step's effect (``S``) is a failed attempt (its value is no document), never
    a recorded coroutine."""
    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(engine_db) as session:
        tokens.create_token_txn(session, space=space)
    driver = workflows.Driver(monkeypatch, zygote=engine_zygote)
    try:
        workflow = workflows.deploy(engine_db, space=space, source=textwrap.dedent(FORGE), class_name=class_name).workflow
        instances.create(space=space, workflow_uid=workflow, instance_id="mix", now=driver.clock())
        driver.run()
        status = instances.status(space=space, workflow_uid=workflow, instance_id="mix")
        events = _events(space, workflow, "mix")
        completed = [e["attributes"]["name"] for e in events if e["eventType"] == "StepCompleted"]
        assert status["status"] == "errored" and completed == [], (status, events)
        if reason is not None:
            assert status["error"] == {"reason": reason, "message": message}, status
        else:
            failed = [e["attributes"] for e in events if e["eventType"] == "StepFailed"]
            assert [f["name"] for f in failed] == ["c"], events
            assert "coroutine" not in json.dumps(status.get("output")), status
    finally:
        workflows.clear_timers(engine_db)


# ---------------------------------------------------------------------------------------------
# 4. Space A against Space B's instance reads, same odd id in both, over a real API server

ODD_ID = "x/../ü %2F'\"<i>?#;.."

READS = """
class R:
    def __init__(self, env): pass
    def run(self, event, step):
        secret = event["params"]["secret"]
        print("log of", secret)
        step.do("s-" + secret, lambda: {"secret": secret})
        return step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
"""


#: Row and dataclass attributes that no answer carries (its schema names what it does).
INTERNAL = {"pk", "instance_pk", "instancePk", "space", "workflow_uid", "workflowUid", "accepted_at", "event_id",
            "created_at", "updated_at", "payload_bytes", "consumed"}


def _keys(document: object) -> set[str]:
    """Every object key of an answer, but inside tenant documents (params, payloads, results)."""
    if isinstance(document, list):
        return set().union(*(_keys(item) for item in document)) if document else set()
    if not isinstance(document, dict):
        return set()
    found = set(document)
    for key, value in document.items():
        if key not in ("params", "payload", "result", "output"):
            found |= _keys(value)
    return found


def _call(api, token: str, path: str) -> tuple[int, bytes]:
    import http.client

    parsed = urllib.parse.urlsplit(api)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_space_a_reads_only_its_own_instance_of_the_same_odd_id(monkeypatch, engine_zygote, db_url, api_server,
                                                                app):
    driver = workflows.Driver(monkeypatch, zygote=engine_zygote)
    spaces = {}
    for who in ("A", "B"):
        space = f"s{uuid.uuid4().hex[:12]}"
        with models_db.session_scope(db_url) as session:
            token = tokens.create_token_txn(session, space=space)
        workflow = workflows.deploy(db_url, space=space, source=textwrap.dedent(READS), class_name="R").workflow
        secret = f"{who}-SECRET-{uuid.uuid4().hex[:6]}"
        instances.create(space=space, workflow_uid=workflow, instance_id=ODD_ID, params={"secret": secret},
                         now=driver.clock())
        instance_events.send_event(space=space, workflow_uid=workflow, instance_id=ODD_ID, event_type="other",
                                   payload={"secret": secret}, now=driver.clock())
        spaces[who] = {"space": space, "token": token, "workflow": workflow, "secret": secret}
    try:
        driver.run()
        a, b = spaces["A"], spaces["B"]
        enc = workflows.HttpInstances.enc(ODD_ID)
        api = api_server.extra["url"]
        suffixes = ("", "/progress", "/events", "/history", "/logs")
        for suffix in suffixes:
            code, body = _call(api, a["token"], f"/v2/spaces/{a['space']}/resources/{a['workflow']}/instances/{enc}{suffix}")
            assert code == 200, (suffix, code, body[:300])
            assert b["secret"].encode() not in body and b["space"].encode() not in body, (suffix, body[:300])
            if suffix in ("/events", "/history", "/logs"):
                assert a["secret"].encode() in body, (suffix, body[:500])
            leaked = _keys(json.loads(body)) & INTERNAL
            assert not leaked, f"{suffix}: the answer carries internal fields {leaked}: {body[:300]!r}"
            for target in (f"/v2/spaces/{a['space']}/resources/{b['workflow']}/instances/{enc}{suffix}",
                           f"/v2/spaces/{b['space']}/resources/{b['workflow']}/instances/{enc}{suffix}"):
                code, body = _call(api, a["token"], target)
                assert code in (401, 403, 404), (target, code, body[:300])
                assert b["secret"].encode() not in body, (target, body[:300])
        # the console, signed in as A: B's instance by B's uid or name, every instance view
        client = app.test_client()
        assert client.post("/ui/sign-in", data={"token": a["token"]}).status_code == 303
        with models_db.session_scope(db_url) as session:
            from models import resources as res_models

            b_name = session.get(res_models.Resource, b["workflow"]).name
        qid = urllib.parse.quote(ODD_ID, safe="")
        for ref in (b["workflow"], b_name):
            for view in ("instance", "instance/live", "instance/history", "instance/logs"):
                page = client.get(f"/ui/workflows/{urllib.parse.quote(ref, safe='')}/{view}?id={qid}")
                if ref == b_name and page.status_code == 200:  # A's own workflow of that name
                    assert a["secret"] in page.text
                else:
                    assert page.status_code == 404, (ref, view, page.status_code)
                assert b["secret"] not in page.text, (ref, view)
    finally:
        workflows.clear_timers(db_url)


# ---------------------------------------------------------------------------------------------
# 5. the console's inbox renders a hostile event escaped

HOSTILE_TYPE = "<script>alert('type')</script>\"'><img src=x onerror=alert(1)>{{7*7}}"
HOSTILE_PAYLOAD = {"</code><script>alert('payload')</script>": "<svg onload=alert(2)>",
                   "q": "\"'><iframe src=javascript:alert(3)>", "tpl": "{{ config }}{% raw %}"}

WAITER = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
"""


def test_the_console_inbox_renders_a_hostile_event_escaped(app, db_url):
    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    workflow = workflows.deploy(db_url, space=space, source=WAITER, class_name="W").workflow
    instance_id = "<b>i</b>"
    instances.create(space=space, workflow_uid=workflow, instance_id=instance_id)
    instance_events.send_event(space=space, workflow_uid=workflow, instance_id=instance_id,
                               event_type=HOSTILE_TYPE, payload=HOSTILE_PAYLOAD)
    client = app.test_client()
    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    qid = urllib.parse.quote(instance_id, safe="")
    for view in ("instance", "instance/live"):
        page = client.get(f"/ui/workflows/{workflow}/{view}?id={qid}")
        assert page.status_code == 200, (view, page.text[:300])
        html = page.json["html"] if view.endswith("live") else page.text  # the live part: JSON {"v", "html"}
        inbox = re.search(r'<table class="grid compact" data-testid="inbox">.*?</table>', html, re.S)
        assert inbox is not None, html[:2000]
        table = inbox.group(0)
        for raw in ("<script>alert(", "<img src=x", "<svg onload", "<iframe src=javascript", "</code><script",
                    "<b>i</b>", "\"'>"):
            assert raw not in html, (view, raw)
            assert raw not in table, (view, raw, table)
        assert "&lt;script&gt;alert(" in table and "&lt;svg onload=alert(2)&gt;" in table, table
        assert "{{7*7}}" in table and "&gt;49" not in table and "config }}" in table, table  # no template evaluation
