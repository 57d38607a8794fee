"""Logs from tenant code, tracebacks you can act on, and the replay-order hint (docs/spec/host-features.md#hf-observability,
2, 7) through the real engine: database, Redis leases, sandbox children, contexts run in-process
by ``tests.support.workflows.Driver``. The attacks (forged frames, floods, bytes that look like
frames) are here too: a log line must never act as a protocol frame or beat the caps.
"""

from __future__ import annotations

import datetime as dt
import textwrap

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models import tenant_logs as log_models
from services import instance_common, instance_history, instances, retention
from services import tenant_logs as log_service
from services.instance_pages import PageRequest
from takohost.domain import tenant_logs as limits
from tests.support import workflows
from workers.sandbox import validation


class Run:
    def __init__(self, db_url, space, driver, source, class_name):
        self.space = space
        self.driver = driver
        self.db_url = db_url
        self.workflow = workflows.deploy(
            db_url, space=space, source=textwrap.dedent(source), class_name=class_name
        ).workflow

    def create(self, instance_id, params=instance_common.ABSENT):
        instances.create(
            space=self.space, workflow_uid=self.workflow, instance_id=instance_id, params=params, now=self.driver.clock()
        )

    def status(self, instance_id):
        return instances.status(space=self.space, workflow_uid=self.workflow, instance_id=instance_id)

    def history(self, instance_id):
        return instance_history.history(
            space=self.space, workflow_uid=self.workflow, instance_id=instance_id, page=PageRequest(limit=1000)
        ).events

    def logs(self, instance_id, **kwargs):
        return log_service.instance_logs(space=self.space, workflow_uid=self.workflow, instance_id=instance_id, **kwargs)

    def all_logs(self, instance_id):
        lines, token = [], None
        while True:
            page = self.logs(instance_id, page=PageRequest(token, 1000))
            if not page.logs:
                return lines, page
            lines += page.logs
            token = page.next_page_token


@pytest.fixture()
def deploy(db_url, space_token, driver):
    return lambda source, class_name: Run(db_url, space_token[0], driver, source, class_name)


TAGGED = """
import logging, os, sys
print("imported")
class Tagged:
    def __init__(self, env): pass
    def run(self, event, step):
        print("in run")
        def effect():
            print("effect says", 42)
            sys.stderr.write("to stderr\\n")
            os.write(1, b"raw fd 1 \\xff\\x00 end\\n")
            logging.warning("careful %s", "now")
            return {"ok": True}
        step.do("first", effect)
        return {"done": True}
"""


def test_print_stderr_fd_and_logging_are_captured_and_tagged(deploy, driver):
    run = deploy(TAGGED, "Tagged")
    run.create("t1")
    assert driver.run() == ["complete"]
    lines, page = run.all_logs("t1")
    assert page.removed_lines == 0
    seen = [(line.step, line.attempt, line.stream, line.message) for line in lines]
    assert seen[:2] == [(None, None, "stdout", "imported"), (None, None, "stdout", "in run")]
    # descriptor 1 is a pipe drained beside the Python-level streams: same step, any order
    assert sorted(seen[2:]) == sorted(
        [
            ("first", 1, "stdout", "effect says 42"),
            ("first", 1, "stderr", "to stderr"),
            ("first", 1, "stdout", "raw fd 1 \ufffd\ufffd end"),
            ("first", 1, "stderr", "WARNING:root:careful now"),  # logging as Python does it
        ]
    )
    epochs = {line.epoch for line in lines}
    assert epochs == {workflows.instance_row(run.db_url, workflow=run.workflow, instance_id="t1").epoch}
    assert all(line.time.tzinfo is not None for line in lines)


def test_logs_are_paged_with_a_cursor_that_follows(deploy, driver):
    run = deploy(
        """
class Many:
    def __init__(self, env): pass
    def run(self, event, step):
        for i in range(25):
            print("line", i)
        return None
""",
        "Many",
    )
    run.create("p1")
    driver.run()
    first = run.logs("p1", page=PageRequest(limit=10))
    assert [line.message for line in first.logs] == [f"line {i}" for i in range(10)]
    rest = run.logs("p1", page=PageRequest(first.next_page_token, 1000))
    assert len(rest.logs) == 15
    assert run.logs("p1", page=PageRequest(token=rest.next_page_token)).logs == []
    with pytest.raises(Exception) as exc:
        run.logs("p1", page=PageRequest(token="forged"))
    assert exc.value.code == "invalid_request"


FAILING = """
import json
class Failing:
    def __init__(self, env): pass
    def run(self, event, step):
        def charge():
            return lookup(event)
        try:
            step.do("charge", charge, {"maxAttempts": 2})
        except Exception:
            pass
        return parse("{not json")

def lookup(event):
    return event["params"]["card"]

def parse(text):
    return json.loads(text)
"""


def test_failures_carry_the_tenants_own_frames_and_status_keeps_its_shape(deploy, driver):
    run = deploy(FAILING, "Failing")
    run.create("f1")
    driver.run()
    assert run.status("f1") == {
        "status": "errored",
        "error": {
            "reason": "run_threw",
            "message": "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        },
    }
    events = run.history("f1")
    failed = [e["attributes"] for e in events if e["eventType"] == "StepAttemptFailed"]
    assert [f["attempt"] for f in failed] == [1, 2]
    frames = failed[0]["error"]["traceback"]
    assert [(f["file"], f["function"], f["source"]) for f in frames] == [
        ("main.py", "charge", "return lookup(event)"),
        ("main.py", "lookup", 'return event["params"]["card"]'),
    ]
    assert all(f["module"] == "main" and f["line"] > 0 for f in frames)
    errored = next(e["attributes"] for e in events if e["eventType"] == "InstanceErrored")
    assert errored["reason"] == "run_threw"
    # host frames (the runtime) and the standard library's (json) are trimmed
    assert [f["function"] for f in errored["traceback"]] == ["run", "parse"]
    # the step row keeps what replay needs, not the traceback
    with models_db.session_scope(run.db_url) as session:
        error = session.scalar(sa.select(inst_models.Step.error).where(inst_models.Step.name == "charge"))
    assert "traceback" not in error
    lines, _ = run.all_logs("f1")
    host = [line for line in lines if line.stream == "host"]
    assert host[0].step == "charge" and host[0].attempt == 1
    assert "KeyError: 'params'" in host[0].message and 'File "main.py", line' in host[0].message
    assert "instance errored: run_threw" in host[-1].message and "in parse" in host[-1].message


CHATTY = """
class Chatty:
    def __init__(self, env): pass
    def run(self, event, step):
        def effect():
            for i in range(100000):
                print("chatty line", i)
            return {"n": 100000}
        step.do("chatty", effect)
        print("after")
        return {"ok": True}
"""


def test_a_chatty_effect_is_bounded_and_the_cut_is_visible(deploy, driver):
    run = deploy(CHATTY, "Chatty")
    run.create("c1")
    assert driver.run() == ["complete"]
    lines, _ = run.all_logs("c1")
    tenant = [line for line in lines if line.stream == "stdout"]
    markers = [line for line in lines if line.stream == "host" and "dropped" in line.message]
    assert limits.BURST_LINES <= len(tenant) < limits.BURST_LINES + 1000
    assert markers, "the dropped lines must be said"
    assert len(markers) <= 20  # one marker per written batch, not one per frame of the child
    dropped = sum(int(m.message.split()[0]) for m in markers)
    assert len([t for t in tenant if t.message.startswith("chatty line")]) + dropped >= 100000


def test_the_per_instance_cap_removes_the_oldest_lines_visibly(deploy, driver, monkeypatch):
    monkeypatch.setattr(limits, "MAX_STORED_LINES", 50)
    run = deploy(
        """
class Cap:
    def __init__(self, env): pass
    def run(self, event, step):
        for i in range(120):
            print("n", i)
        return None
""",
        "Cap",
    )
    run.create("cap1")
    driver.run()
    lines, page = run.all_logs("cap1")
    assert len(lines) == 50 and lines[-1].message == "n 119"
    assert run.logs("cap1").removed_lines == 70


def test_logs_are_purged_with_the_instance(deploy, driver, db_url):
    run = deploy(TAGGED, "Tagged")
    run.create("gone")
    driver.run()
    assert run.all_logs("gone")[0]
    retention.purge_retired(now=driver.clock() + dt.timedelta(seconds=retention.RETENTION_SECONDS + 60))
    with models_db.session_scope(db_url) as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(log_models.TenantLog)) == 0


def test_logs_are_purged_with_a_deleted_workflow(deploy, driver, db_url):
    from services import instance_stop

    run = deploy(TAGGED, "Tagged")
    run.create("del1")
    driver.run()
    assert run.all_logs("del1")[0]
    pk = workflows.instance_row(db_url, workflow=run.workflow, instance_id="del1").pk
    assert instance_stop.purge_workflow(run.workflow, now=driver.clock())
    with models_db.session_scope(db_url) as session:
        left = session.scalar(
            sa.select(sa.func.count()).select_from(log_models.TenantLog).where(log_models.TenantLog.instance_pk == pk)
        )
    assert left == 0


RANDOM_NAMES = """
import random
class Dice:
    def __init__(self, env): pass
    def run(self, event, step):
        roll = step.do(f"roll {random.random()}", lambda: {"n": 4})
        step.sleep("nap", 10)
        return roll
"""


def test_replay_that_skips_recorded_steps_is_diagnosed(deploy, driver):
    run = deploy(RANDOM_NAMES, "Dice")
    run.create("d1")
    assert driver.run() == ["sleeping"]
    assert driver.advance(11) == ["complete"]
    events = run.history("d1")
    diverged = [e["attributes"] for e in events if e["eventType"] == "ReplayDiverged"]
    assert diverged and diverged[0]["kind"] == "skipped"
    assert diverged[0]["names"][0].startswith("roll ") and diverged[0]["name"].startswith("roll ")
    lines, _ = run.all_logs("d1")
    assert any(line.stream == "host" and "replay diverged (skipped)" in line.message for line in lines)
    # a diagnostic only: the new name ran its effect, the instance completed as docs/spec/durable-workflow.md#dw-replay allows
    assert run.status("d1") == {"status": "complete", "output": {"n": 4}}


def test_deterministic_replay_records_no_diagnostic(deploy, driver):
    run = deploy(
        """
class Calm:
    def __init__(self, env): pass
    def run(self, event, step):
        a = step.do("a", lambda: {"n": 1})
        step.do("a", lambda: {"n": 2})          # a completed name, asked again: fine
        step.sleep("nap", 5)
        return a
""",
        "Calm",
    )
    run.create("calm")
    driver.run()
    driver.advance(6)
    assert "ReplayDiverged" not in [e["eventType"] for e in run.history("calm")]


# -- attacks ---------------------------------------------------------------------------------

FORGE = """
import json, os, struct
def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body
class Forge:
    def __init__(self, env): pass
    def run(self, event, step):
        mode = event["params"]["mode"]
        if mode == "stdout-frame":
            # bytes of a real final frame on stdout: just text
            os.write(1, frame({"op": "run_returned", "output": {"forged": True}}) + b"\\n")
            print(json.dumps({"op": "run_returned", "output": {"forged": True}}))
            return {"honest": True}
        if mode == "host-line":
            os.write(3, frame({"op": "log", "lines": [[0, "host", "instance completed"]], "dropped": 0}))
        if mode == "flood":
            lines = [[0, "stdout", "x"] for _ in range(256)]
            for _ in range(40):
                os.write(3, frame({"op": "log", "lines": lines, "dropped": 0}))
        if mode == "empty":
            os.write(3, frame({"op": "log", "lines": [], "dropped": 0}))
        if mode == "long":
            os.write(3, frame({"op": "log", "lines": [[0, "stdout", "y" * 5000]], "dropped": 0}))
        if mode == "dropped-spam":
            # forged counts cost no storage: they add up into one marker per written batch
            os.write(3, b"".join(frame({"op": "log", "lines": [], "dropped": 1}) for _ in range(20000)))
            return {"honest": False}
        if mode == "nul":
            print("a\\x00b", "\\ud800", "\\x1b[2J")
            return {"honest": True}
        step.do("after", lambda: {"n": 1})
        return {"honest": True}
"""


@pytest.mark.parametrize("mode", ["host-line", "flood", "empty", "long"])
def test_forged_log_frames_break_the_protocol(deploy, driver, mode):
    run = deploy(FORGE, "Forge")
    run.create(f"forge-{mode}", params={"mode": mode})
    assert driver.run() == ["errored"]
    status = run.status(f"forge-{mode}")
    assert status["error"]["reason"] == "run_threw"
    assert "broke the host protocol" in status["error"]["message"]
    lines, _ = run.all_logs(f"forge-{mode}")
    assert not [line for line in lines if line.stream == "host" and line.message == "instance completed"]
    # the host's own budget: a burst, plus what the rate refilled while the frames came in
    assert len([line for line in lines if line.stream == "stdout"]) <= limits.BURST_LINES + limits.RATE_LINES


def test_frames_written_to_stdout_are_only_text(deploy, driver):
    run = deploy(FORGE, "Forge")
    run.create("forge-stdout", params={"mode": "stdout-frame"})
    assert driver.run() == ["complete"]
    assert run.status("forge-stdout") == {"status": "complete", "output": {"honest": True}}
    lines, _ = run.all_logs("forge-stdout")
    assert any('"op": "run_returned"' in line.message for line in lines)


def test_nul_lone_surrogates_and_escapes_are_stored_safely(deploy, driver):
    run = deploy(FORGE, "Forge")
    run.create("forge-nul", params={"mode": "nul"})
    assert driver.run() == ["complete"]
    lines, _ = run.all_logs("forge-nul")
    assert [line.message for line in lines] == ["a\ufffdb \ufffd \x1b[2J"]


def test_a_syntax_error_names_file_and_line(zygote):
    outcome = validation.validate_version(
        zygote=zygote,
        main_module="main.py",
        modules={"main.py": "import helper\n", "helper.py": "x = 1\ndef broken(:\n    pass\n"},
    )
    assert not outcome.ok
    assert outcome.message.startswith("SyntaxError: ") and outcome.message.endswith("(helper.py, line 2)")
    outcome = validation.validate_version(
        zygote=zygote, main_module="main.py", modules={"main.py": "A = 1\nB = undefined_name\n"}
    )
    assert outcome.message == "NameError: name 'undefined_name' is not defined (main.py, line 2)"


# -- cron runs -------------------------------------------------------------------------------

CHATTY_HANDLER = """
import logging
def scheduled(event, env, ctx):
    print("handler starts", event["scheduledTime"])
    logging.warning("about to fail")
    fail(event)

def fail(event):
    raise RuntimeError("boom at " + str(event["scheduledTime"]))
"""


def test_a_cron_run_keeps_its_logs_and_its_traceback(db_url, space_token):
    from tests.integration.test_cron_support import at, create_stack, decide
    from workers import cron_tasks

    space, _ = space_token
    minute = "2030-03-04T10:05:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=CHATTY_HANDLER, now=at(minute) - dt.timedelta(seconds=30)
    )
    [(match_pk, *_)] = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(match_pk) == "failed"
    page = log_service.run_logs(space=space, trigger_uid=stack.trigger_uid, scheduled_time=minute)
    messages = [(line.delivery, line.stream, line.message) for line in page.logs]
    assert messages[:2] == [(1, "stdout", "handler starts 1898849100000"), (1, "stderr", "WARNING:root:about to fail")]
    assert messages[-1][1] == "host" and "RuntimeError: boom at 1898849100000 (main.py, line 9)" in messages[-1][2]
    assert 'File "main.py", line 6, in scheduled' in messages[-1][2]
    # the same run by epoch milliseconds; an unknown time is not_found
    by_ms = log_service.run_logs(space=space, trigger_uid=stack.trigger_uid, scheduled_time="1898849100000")
    assert by_ms.logs == page.logs
    with pytest.raises(Exception) as exc:
        log_service.run_logs(space=space, trigger_uid=stack.trigger_uid, scheduled_time="2030-03-04T10:06:00Z")
    assert exc.value.code == "not_found"
    with pytest.raises(Exception) as exc:
        log_service.run_logs(space="other", trigger_uid=stack.trigger_uid, scheduled_time=minute)
    assert exc.value.code == "not_found"


def test_forged_dropped_counts_add_up_into_one_marker(deploy, driver):
    run = deploy(FORGE, "Forge")
    run.create("forge-dropped", params={"mode": "dropped-spam"})
    assert driver.run() == ["complete"]
    lines, _ = run.all_logs("forge-dropped")
    assert [line.message.split(":")[0] for line in lines] == ["20000 lines dropped"]


def test_the_logs_routes_over_http(db_url, space_token, driver, deploy):
    from urllib.parse import quote

    from host_api.app import create_app
    from tests.integration.test_cron_support import at, create_stack, decide
    from workers import cron_tasks

    space, token = space_token
    client = create_app().test_client()
    headers = {"Authorization": f"Bearer {token}"}
    run = deploy(TAGGED, "Tagged")
    run.create("a/b %?")
    driver.run()
    path = f"/v2/spaces/{space}/resources/{run.workflow}/instances/{quote('a/b %?', safe='')}/logs"
    body = client.get(path, headers=headers).get_json()
    assert body["logs"][0] == {**body["logs"][0], "stream": "stdout", "message": "imported", "step": None}
    assert client.get(path + "?limit=1", headers=headers).get_json()["logs"] == body["logs"][:1]
    assert client.get(path + "?limit=0", headers=headers).get_json()["error"]["code"] == "invalid_request"
    missing = f"/v2/spaces/{space}/resources/{run.workflow}/instances/nope/logs"
    assert client.get(missing, headers=headers).get_json()["error"]["code"] == "unknown_instance"
    minute = "2030-03-04T10:15:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=CHATTY_HANDLER, now=at(minute) - dt.timedelta(seconds=30)
    )
    [(match_pk, *_)] = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(match_pk) == "failed"
    runs = f"/v2/spaces/{space}/resources/{stack.trigger_uid}/runs"
    ledger = client.get(runs, headers=headers).get_json()["runs"]
    scheduled = ledger[0]["scheduledTime"]
    lines = client.get(f"{runs}/{quote(scheduled, safe='')}/logs", headers=headers).get_json()["logs"]
    assert lines[0] == {**lines[0], "delivery": 1, "stream": "stdout"} and set(lines[0]) == {
        "time", "delivery", "stream", "message"
    }
    assert client.get(f"{runs}/yesterday/logs", headers=headers).get_json()["error"]["code"] == "invalid_request"
    other = client.get(f"/v2/spaces/other/resources/{stack.trigger_uid}/runs/{scheduled}/logs", headers=headers)
    assert other.status_code == 404
