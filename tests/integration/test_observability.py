"""Where is it (``…/progress``) and one trace per instance, with contexts run in this process
(docs/spec/host-features.md#hf-observability). The trace is read from the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from host_api import schemas
from models import db as models_db
from models import resources as res_models
from services import instance_events, instance_progress, instance_stop, instances
from services.telemetry import tracing
from tests.support import workflows

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
    assert "retry" in [c.attributes.get("takohost.woken_by") for c in contexts]  # the 0 s retry
    spawns = by_name["takohost.sandbox.spawn"]
    assert {s.parent.span_id for s in spawns} <= context_ids and len(spawns) >= 2

    # terminate lands in the trace of the instance it stops
    instances.create(space=space, workflow_uid=wf, instance_id="t-2")
    driver.run()
    instance_stop.terminate(space=space, workflow_uid=wf, instance_id="t-2")
    (stopped,) = [s for s in spans.get_finished_spans() if s.name == "takohost.instance.terminated"]
    assert stopped.context.trace_id == tracing.trace_id_of(wf, "t-2")
    assert stopped.parent.span_id == tracing.root_span_id_of(wf, "t-2")


def test_progress_says_what_each_instance_does(db_url, space_token, driver):
    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=WHERE, class_name="Where")
    wf = deployed.workflow
    for mode in ("retry", "sleep", "wait"):
        instances.create(space=space, workflow_uid=wf, instance_id=mode, params={"mode": mode})
    driver.run()

    def where(instance_id):
        return schemas.InstanceProgress().dump(
            instance_progress.progress(space=space, workflow_uid=wf, instance_id=instance_id)
        )

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
    # status() keeps the spec's exact shape (docs/spec/durable-workflow.md#dw-status)
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
    found = instance_progress.progress(space=space, workflow_uid=deployed.workflow, instance_id="q")
    assert found.status == "queued" and found.activity == "queued"
    assert found.reason == "no_version" and found.message is not None and "Deployment" in found.message


BLOCKING = """
import os, time
class Blocking:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect():
            open(p["started"], "w").close()
            while not os.path.exists(p["go"]):
                time.sleep(0.01)
            return {"v": 1}
        return step.do("a", effect)
"""


@pytest.fixture()
def metrics_dir(tmp_path, monkeypatch):
    """Metrics on in this process (a multiprocess directory of its own); yields a reader of
    ``{(name, labels): value}``."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from services.telemetry import metrics

    directory = tmp_path / "metrics"
    directory.mkdir()
    monkeypatch.setenv(metrics.ENV_DIR, str(directory))

    def read() -> dict:
        text = generate_latest(metrics.registry()).decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    yield read
    monkeypatch.delenv(metrics.ENV_DIR)
    metrics._get("")  # forget the directory's metric objects


def test_a_fenced_context_is_counted(db_url, space_token, zygote, monkeypatch, tmp_path, metrics_dir):
    import threading

    from core import config
    from models import instances as inst_models
    from workers.engine import context, store
    from workers.sandbox import heartbeat
    from workers.sandbox import lease as lease_mod

    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    params = {"started": str(tmp_path / "started"), "go": str(tmp_path / "go")}
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="f", params=params)
    pk = driver.queue.pop()
    settings = config.load_settings()
    leases = lease_mod.store_for(redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms)
    beat = heartbeat.heartbeat_for(leases=leases, url=db_url, read_epochs=store.backend_for(db_url).read_epochs)
    monkeypatch.setattr(beat, "beat", lambda current: None)  # the commit is fenced, not the heartbeat
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(context.run_context(pk, zygote=zygote)))
    thread.start()
    workflows.wait_until(lambda: (tmp_path / "started").exists(), timeout=20, message="effect started")
    with models_db.session_scope(db_url) as session:
        session.execute(
            sa.update(inst_models.Instance).where(inst_models.Instance.pk == pk)
            .values(epoch=inst_models.Instance.epoch + 1)
        )
    (tmp_path / "go").touch()
    thread.join(30)
    assert outcome == ["fenced"]
    samples = metrics_dir()
    assert samples[("takohost_fencing_rejections_total", ())] == 1
    assert samples[("takohost_context_duration_seconds_count", (("outcome", "fenced"),))] == 1
    assert samples[("takohost_instances_started_total", (("space", space), ("workflow", deployed.workflow)))] == 1
    assert samples[("takohost_step_commit_seconds_count", (("kind", "start"),))] == 1
    assert samples[("takohost_sandbox_spawn_seconds_count", (("kind", "workflow"),))] == 1


def test_cron_recording_lateness_is_observed(db_url, space_token, monkeypatch, metrics_dir):
    from beat import cron_recorder
    from tests.integration.test_cron_support import create_stack

    now = dt.datetime.now(dt.UTC)
    minute = now.replace(second=0, microsecond=0)
    create_stack(db_url, space=space_token[0], cron="* * * * *", now=minute - dt.timedelta(seconds=1))
    monkeypatch.setattr(cron_recorder.dispatch, "deliver_cron_matches", lambda pks: len(pks))
    assert cron_recorder.record_due(now=now, beat_id="test-beat") >= 1
    samples = metrics_dir()
    assert samples[("takohost_cron_record_lateness_seconds_count", ())] >= 1
    late = samples[("takohost_cron_record_lateness_seconds_sum", ())] / samples[
        ("takohost_cron_record_lateness_seconds_count", ())
    ]
    assert 0 <= late < 61  # recorded within the minute, as the 60 s rule requires


def test_cron_delivery_start_lateness_and_handler_spawn_are_observed(db_url, space_token, metrics_dir):
    from tests.integration.test_cron_support import at, create_stack, decide
    from workers import cron_tasks

    minute = "2030-03-04T10:05:00Z"
    stack = create_stack(
        db_url, space=space_token[0], cron="*/5 * * * *", now=at(minute) - dt.timedelta(seconds=30),
        variables={"EXPECTED": {"cron": "*/5 * * * *", "scheduledTime": int(at(minute).timestamp() * 1000)}},
    )
    recorded = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(recorded[0][0]) == "ok"
    samples = metrics_dir()
    assert samples[("takohost_cron_delivery_start_lateness_seconds_count", ())] == 1
    assert samples[("takohost_sandbox_spawn_seconds_count", (("kind", "scheduled"),))] == 1


def test_egress_connections_and_bytes_are_counted_per_space(db_url, space_token, metrics_dir):
    """``takohost_egress_connections_total`` / ``takohost_egress_bytes_total`` (README "Metrics"):
    a real cron delivery's public connection and refused look-up, counted for its Space."""
    from tests.integration.test_cron_support import at, create_stack, decide
    from tests.support import egress as net
    from workers import cron_tasks

    address = net.public_address()
    space = space_token[0]
    minute = "2030-03-04T10:05:00Z"
    handler = (
        "import urllib.request\n"
        "def scheduled(event, env, ctx):\n"
        f"    urllib.request.urlopen('http://{address}/count', timeout=10).read()\n"
        "    import socket\n"
        "    s = socket.socket(); s.settimeout(5)\n"
        "    try:\n"
        "        socket.socket.__mro__[1].connect(s, ('10.0.0.5', 443))  # past the runtime: the proxy refuses\n"
        "        s.recv(1)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", source=handler, now=at(minute) - dt.timedelta(seconds=30))
    recorded = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    with net.http_server(address):
        assert cron_tasks.deliver(recorded[0][0]) == "ok"
    samples = metrics_dir()
    assert samples[("takohost_egress_connections_total", (("outcome", "ok"), ("space", space)))] == 1
    assert samples[("takohost_egress_connections_total", (("outcome", "refused"), ("space", space)))] == 1
    assert samples[("takohost_egress_bytes_total", (("direction", "sent"), ("space", space)))] > 30
    assert samples[("takohost_egress_bytes_total", (("direction", "received"), ("space", space)))] > 30
