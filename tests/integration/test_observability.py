"""Where is it (``…/progress``) and one trace per instance, with contexts run in this process
(issue 13 items 3 and 5). The trace is read from the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import resources as res_models
from tests.support import workflows
from workers.services import instance_events, instance_progress, instances
from workers.telemetry import tracing

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

TRACED = """
class Traced:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        state = {"n": 0}
        def flaky():
            raise RuntimeError("first attempts fail")
        a = step.do("first", lambda: {"n": 1})
        try:
            step.do("flaky", flaky, {"maxAttempts": 2})
        except Exception:
            pass
        got = step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 600})
        return {"a": a, "got": got}
"""

WHERE = """
class Where:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        mode = event["params"]["mode"]
        if mode == "retry":
            step.do("charge", lambda: 1 / 0, {"maxAttempts": 3, "initialDelaySeconds": 3600})
        elif mode == "sleep":
            step.sleep("nap", 3600)
        else:
            step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 600})
        return {}
"""


@pytest.fixture(scope="module")
def db_url():
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


@pytest.fixture()
def driver(monkeypatch, zygote, db_url):
    yield workflows.Driver(monkeypatch, zygote=zygote)
    workflows.clear_timers(db_url)


@pytest.fixture()
def spans():
    exporter = InMemorySpanExporter()
    tracing.use(tracing.provider(exporter=exporter, processor="simple"))
    yield exporter
    tracing.use(None)


def test_one_trace_links_create_contexts_attempts_commits_and_the_waking_event(db_url, space_token, driver, spans):
    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=TRACED, class_name="Traced")
    wf = deployed.workflow
    instances.create(space=space, workflow_uid=wf, instance_id="t-1")
    driver.run()
    instance_events.send_event(space=space, workflow_uid=wf, instance_id="t-1", event_type="approved")
    driver.run()
    assert instances.status(space=space, workflow_uid=wf, instance_id="t-1")["status"] == "complete"

    finished = spans.get_finished_spans()
    trace_id = tracing.trace_id_of(wf, "t-1")
    assert {s.context.trace_id for s in finished} == {trace_id}
    by_name: dict[str, list] = {}
    for s in finished:
        by_name.setdefault(s.name, []).append(s)
    (create,) = by_name["takohost.instance.create"]
    assert create.parent is None and create.context.span_id == tracing.root_span_id_of(wf, "t-1")
    assert create.attributes["takohost.instance_id"] == "t-1"

    contexts = sorted(by_name["takohost.context"], key=lambda s: s.start_time)
    assert all(c.parent.span_id == create.context.span_id for c in contexts)
    assert [c.attributes["takohost.outcome"] for c in contexts][-1] == "complete"
    assert "waiting" in [c.attributes["takohost.outcome"] for c in contexts]
    epochs = [c.attributes["takohost.epoch"] for c in contexts]
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)

    attempts = by_name["takohost.step.attempt"]
    context_ids = {c.context.span_id for c in contexts}
    assert all(a.parent.span_id in context_ids for a in attempts)
    flaky = [a for a in attempts if a.attributes["takohost.step"] == "flaky"]
    assert [a.attributes["takohost.attempt"] for a in flaky] == [1, 2]
    assert all(not a.status.is_ok for a in flaky)
    (first,) = [a for a in attempts if a.attributes["takohost.step"] == "first"]
    assert first.status.is_ok

    commits = by_name["takohost.commit"]
    attempt_commits = [c for c in commits if c.attributes["takohost.commit"] == "attempt"]
    assert {c.parent.span_id for c in attempt_commits} == {a.context.span_id for a in attempts}
    kinds = {c.attributes["takohost.commit"] for c in commits}
    assert {"start", "attempt", "wait_suspend", "wait", "terminal"} <= kinds

    (event,) = by_name["takohost.event.send"]
    assert event.parent.span_id == create.context.span_id
    assert event.attributes["takohost.event_type"] == "approved" and event.attributes["takohost.woke"] is True
    assert event.start_time < contexts[-1].start_time  # the event woke the last context


def test_progress_says_what_each_instance_does(db_url, space_token, driver):
    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=WHERE, class_name="Where")
    wf = deployed.workflow
    for mode in ("retry", "sleep", "wait"):
        instances.create(space=space, workflow_uid=wf, instance_id=mode, params={"mode": mode})
    driver.run()

    def where(instance_id):
        return instance_progress.progress(space=space, workflow_uid=wf, instance_id=instance_id)

    retry = where("retry")
    assert retry["status"] == "running" and retry["activity"] == "retrying"
    assert retry["step"] == {"name": "charge", "kind": "do", "attempt": 2}
    assert retry["lastError"]["type"] == "ZeroDivisionError"
    retry_at = dt.datetime.fromisoformat(retry["retryAt"].replace("Z", "+00:00"))
    assert 3590 < (retry_at - dt.datetime.now(dt.UTC)).total_seconds() <= 3600
    assert retry["context"]["epoch"] >= 1 and retry["context"]["versionUid"] == deployed.version

    sleep = where("sleep")
    assert sleep["activity"] == "sleeping" and sleep["step"] == {"name": "nap", "kind": "sleep"}
    assert "wakeAt" in sleep

    wait = where("wait")
    assert wait["activity"] == "waiting" and wait["eventType"] == "approved" and "timeoutAt" in wait
    # status() keeps the seed's exact shape
    assert instances.status(space=space, workflow_uid=wf, instance_id="wait") == {"status": "waiting"}

    instance_events.send_event(space=space, workflow_uid=wf, instance_id="wait", event_type="approved")
    assert where("wait")["activity"] == "starting"  # woken: a context is due
    driver.run()
    assert where("wait")["activity"] == "finished"


def test_progress_says_no_version_when_no_deployment_can_run_it(db_url, space_token, driver):
    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=WHERE, class_name="Where")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="q", params={"mode": "sleep"})
    driver.queue.clear()  # no context ran: the instance stays queued
    with models_db.session_scope(db_url) as session:  # the Deployment goes away meanwhile
        session.execute(
            sa.update(res_models.Resource)
            .where(res_models.Resource.uid == deployed.deployment)
            .values(deleted_at=dt.datetime.now(dt.UTC))
        )
    body = instance_progress.progress(space=space, workflow_uid=deployed.workflow, instance_id="q")
    assert body["status"] == "queued" and body["activity"] == "queued"
    assert body["reason"] == "no_version" and "Deployment" in body["message"]
