"""Host log fields and formats, metric names, trace ids and timer lateness (docs/spec/host-features.md#hf-observability)."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re

import pytest

from services.telemetry import logs, metrics, tracing
from takohost.domain import decide
from workers.engine import observe


def _logger(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter() if fmt == "json" else logs.TextFormatter())
    handler.addFilter(logs.FieldsFilter())
    logger = logging.getLogger(f"test.telemetry.{fmt}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream


def test_json_lines_carry_the_bound_instance_fields_and_the_call_extras():
    logger, stream = _logger("json")
    with logs.bound(workflow="wf-1", space="acme", instance_id="order 42", instance=7):
        logs.bind(epoch=3)
        logger.info("context ended", extra={"outcome": "complete"})
    logger.info("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "context ended" and first["level"] == "INFO"
    assert {k: first[k] for k in ("workflow", "space", "instance_id", "instance", "epoch", "outcome")} == {
        "workflow": "wf-1", "space": "acme", "instance_id": "order 42", "instance": 7, "epoch": 3,
        "outcome": "complete",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert "workflow" not in second  # the scope ended


def test_another_thread_line_about_a_remembered_instance_gets_its_fields():
    logger, stream = _logger("json")
    logs.remember_instance(99, {"workflow": "wf-9", "space": "s", "instance_id": "x", "instance": 99, "epoch": 2})
    try:
        with logs.bound(workflow="wf-1", instance=7):  # this thread runs another instance
            logger.warning("lease lost", extra={"instance": 99})
    finally:
        logs.forget_instance(99)
    line = json.loads(stream.getvalue())
    assert line["workflow"] == "wf-9" and line["epoch"] == 2 and line["instance"] == 99


def test_text_format_puts_fields_on_the_message_line_before_a_traceback():
    logger, stream = _logger("text")
    with logs.bound(workflow="wf-1", instance_id="a b"):
        try:
            raise KeyError("params")
        except KeyError:
            logger.exception("failed")
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith('failed workflow=wf-1 instance_id="a b"')
    assert rest[0].startswith("Traceback")


def test_log_format_choice():
    assert logs.log_format("JSON") == "json"
    with pytest.raises(ValueError):
        logs.log_format("xml")


def test_metric_names_have_the_prefix_and_base_units():
    names = list(metrics.DEFINITIONS) + list(metrics.SCRAPE_GAUGES)
    assert all(name.startswith("takohost_") for name in names)
    for name, (kind, _help, _labels, _buckets) in metrics.DEFINITIONS.items():
        assert name.endswith("_total") if kind == "counter" else name.endswith("_seconds")


def test_hooks_are_noops_without_a_multiprocess_dir(monkeypatch):
    monkeypatch.delenv(metrics.ENV_DIR, raising=False)
    assert not metrics.enabled()
    metrics.inc("takohost_fencing_rejections_total")
    metrics.observe("takohost_step_commit_seconds", 0.01, kind="attempt")


def test_trace_ids_are_derived_from_the_instance():
    a = tracing.trace_id_of("wf-1", "order-1")
    assert a == tracing.trace_id_of("wf-1", "order-1") and 0 < a < 2**128
    assert a != tracing.trace_id_of("wf-1", "order-2") != tracing.trace_id_of("wf-2", "order-1")
    assert 0 < tracing.root_span_id_of("wf-1", "order-1") < 2**64


def test_timer_lateness_is_that_of_the_due_pending_step():
    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    ago = lambda s: now - dt.timedelta(seconds=s)  # noqa: E731
    steps = {
        "done": decide.StepRecord(name="done", kind="do", state="succeeded", wake_at=ago(100)),
        "nap": decide.StepRecord(name="nap", kind="sleep", state="pending", wake_at=ago(2)),
    }
    assert observe.timer_lateness(steps, now=now) == ("wake", 2.0)
    wait = {"w": decide.StepRecord(name="w", kind="wait", state="pending", timeout_at=ago(-5))}
    assert observe.timer_lateness(wait, now=now) is None  # not due: woken by an event
    retry = {"r": decide.StepRecord(name="r", kind="do", state="pending", wake_at=ago(0.5))}
    assert observe.timer_lateness(retry, now=now) == ("retry", 0.5)


def test_text_format_writes_values_as_compact_json_and_leaves_celerys_data_out():
    logger, stream = _logger("text")
    logger.info("x", extra={"event": {"cron": "* * * * *", "n": 1}, "count": 3})
    assert stream.getvalue().strip().endswith('x count=3 event={"cron":"* * * * *","n":1}')
    celery = logging.getLogger("celery.app.trace.test")
    celery.handlers[:] = logger.handlers
    celery.propagate = False
    celery.setLevel(logging.INFO)
    celery.info("Task t[1] succeeded", extra={"data": {"id": "1"}})
    assert stream.getvalue().splitlines()[-1].endswith("Task t[1] succeeded")
