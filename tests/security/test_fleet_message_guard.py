"""``services.message_guard.message_problem`` on messages built by Celery itself (docs/spec/host-features.md#hf-isolation):
everything our producers send passes, the shapes an attacker could add do not. Pure: no broker."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from kombu import Message

from services import dispatch, message_guard
from services.celery_app import app

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
TASKS = {dispatch.RUN_CONTEXT, dispatch.RECONCILE_OPERATION, dispatch.DELIVER_CRON_MATCH, "celery.chord_unlock"}


def _message(name: str, args: list, **options) -> Message:
    """The kombu message Celery's own producer would publish for ``send_task(name, args, **options)``."""
    headers, _properties, body, _sent = app.amqp.create_task_message(
        str(uuid.uuid4()), name, args, {}, now=NOW, **options
    )
    return Message(
        body=json.dumps(body), content_type="application/json", content_encoding="utf-8",
        headers=headers, accept=["application/json"],
    )


def _problem(message: Message) -> str | None:
    return message_guard.message_problem(message, task_names=TASKS, now=NOW)


@pytest.mark.parametrize("name, args, options", [
    (dispatch.RUN_CONTEXT, [12], {}),
    (dispatch.DELIVER_CRON_MATCH, [7], {}),
    (dispatch.RECONCILE_OPERATION, [str(uuid.uuid4())], {}),
    (dispatch.RECONCILE_OPERATION, [str(uuid.uuid4())], {"countdown": 2.0}),  # the reconcile retry
], ids=["run_context", "deliver_cron_match", "reconcile", "reconcile-retry"])
def test_what_our_producers_send_passes(name, args, options):
    assert _problem(_message(name, args, **options)) is None


@pytest.mark.parametrize("name, options, problem", [
    ("celery.chord_unlock", {}, "not a task of this host"),
    ("takohost.unknown", {}, "not a task of this host"),
    (dispatch.RUN_CONTEXT, {"countdown": 3600}, "eta more than 300 s ahead"),
    (dispatch.RUN_CONTEXT, {"time_limit": 1, "soft_time_limit": 1}, "time limits are not accepted"),
    (dispatch.RUN_CONTEXT, {"callbacks": [{"task": dispatch.RUN_CONTEXT, "args": [1]}]},
     "callbacks, errbacks, chains and chords are not accepted"),
    (dispatch.RUN_CONTEXT, {"chain": [{"task": dispatch.RUN_CONTEXT, "args": [1]}]},
     "callbacks, errbacks, chains and chords are not accepted"),
], ids=["builtin", "unknown", "far-eta", "time-limit", "callbacks", "chain"])
def test_what_an_attacker_could_add_is_refused(name, options, problem):
    assert problem in _problem(_message(name, [1], **options))


def test_bodies_and_headers_celery_never_sends_are_refused():
    good = _message(dispatch.RUN_CONTEXT, [1])
    for body, expected in (([1], "body is not [args, kwargs, embed]"), ({"a": 1}, "body is not"),
                           ([[1], [], {}], "kwargs not an object"), ([[1], {}, "x"], "embed is not an object")):
        forged = Message(body=json.dumps(body), content_type="application/json", content_encoding="utf-8",
                         headers=good.headers, accept=["application/json"])
        assert expected in _problem(forged)
    assert "not Celery protocol 2" in _problem(Message(body="{}", content_type="application/json", headers={}))
    assert "no task id" in _problem(Message(body="{}", content_type="application/json",
                                            headers={"task": dispatch.RUN_CONTEXT}))
    assert "not JSON" in _problem(Message(body=b"\x80", content_type="application/x-python-serialize",
                                          headers=good.headers))
    assert "retries is not a count" in _problem(Message(body="[]", content_type="application/json",
                                                        headers={**good.headers, "retries": "many"}))
