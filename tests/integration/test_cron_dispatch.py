"""Bulk dispatch of cron deliveries through the real Redis broker (docs/spec/cron-trigger.md#cr-delivery at-least-once;
docs/spec/cron-trigger.md#cr-runs): beat sends a minute's matches through one producer in pipelined writes, after
commit, and a broker failure is a warning that leaves the matches to the sweep — never an error
raised into beat. Each test uses its own Celery app on a private namespace, so no session worker
consumes its messages."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from redis import connection as redis_connection

from beat import cron_recorder
from core import config
from services import celery_app, dispatch
from tests.integration.test_cron_support import create_stack, matches_of


@dataclasses.dataclass
class Broker:
    """A private Celery app patched into ``services.dispatch``, and what it did."""

    app: Celery
    queue_key: str
    client: redis.Redis
    producers: list[object]
    redis_writes: list[int]

    def sent(self) -> list[tuple[str, list]]:
        """The queued messages, oldest first: ``[(task name, args)]``."""
        raw = reversed(self.client.lrange(self.queue_key, 0, -1))  # LPUSH: newest first
        messages = [json.loads(item) for item in raw]
        return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def _private_app(namespace: str, **overrides: str) -> Celery:
    settings = dataclasses.replace(config.load_settings(), namespace=namespace, **overrides)
    return celery_app.make_celery(settings)


@pytest.fixture()
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    namespace = f"tkd{uuid.uuid4().hex[:10]}"
    private = _private_app(namespace)
    client = redis.Redis.from_url(config.load_settings().redis_url)
    producers: list[object] = []
    writes = [0]
    pool = private.producer_pool
    acquire = pool.acquire

    def counting_acquire(*args: object, **kwargs: object) -> object:
        producer = acquire(*args, **kwargs)
        producers.append(producer)
        return producer

    send_packed = redis_connection.AbstractConnection.send_packed_command

    def counting_send(self: object, command: object, check_health: bool = True) -> object:
        writes[0] += 1  # one socket write: a single command or a whole pipeline
        return send_packed(self, command, check_health)

    monkeypatch.setattr(pool, "acquire", counting_acquire)
    monkeypatch.setattr(dispatch, "app", private)
    private.send_task("takohost.warm_up", queue=private.conf.task_default_queue)  # connect, declare
    client.delete(f"{namespace}:{namespace}.tasks")
    producers.clear()
    monkeypatch.setattr(redis_connection.AbstractConnection, "send_packed_command", counting_send)
    try:
        yield Broker(private, f"{namespace}:{namespace}.tasks", client, producers, writes)
    finally:
        monkeypatch.undo()
        for key in client.scan_iter(match=f"{namespace}:*"):
            client.delete(key)
        private.close()


def test_bulk_send_uses_one_producer_and_pipelined_writes(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "BULK_CHUNK", 100)
    pks = list(range(1, 251))
    assert dispatch.deliver_cron_matches(pks) == 250
    assert broker.sent() == [(dispatch.DELIVER_CRON_MATCH, [pk]) for pk in pks]
    assert len(broker.producers) == 1
    # Three chunks of at most 100 messages: a handful of round trips, not one per message.
    assert broker.redis_writes[0] <= 10, broker.redis_writes[0]
    assert dispatch.deliver_cron_matches([]) == 0 and len(broker.producers) == 1


def test_run_contexts_is_the_same_bulk_send(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Timers and sweep wake instances through ``run_contexts`` (docs/spec/host-features.md#hf-performance)."""
    monkeypatch.setattr(dispatch, "BULK_CHUNK", 100)
    pks = list(range(1, 251))
    assert dispatch.run_contexts(pks) == 250
    assert broker.sent() == [(dispatch.RUN_CONTEXT, [pk]) for pk in pks]
    assert len(broker.producers) == 1
    assert broker.redis_writes[0] <= 10, broker.redis_writes[0]
    assert dispatch.run_contexts([]) == 0 and len(broker.producers) == 1


def test_record_due_sends_the_minute_in_one_bulk_send_after_commit(
    db_url: str, space_token: tuple[str, str], broker: Broker
) -> None:
    space, _ = space_token
    now = dt.datetime.now(dt.UTC)
    minute = now.replace(second=0, microsecond=0)
    uids = [
        create_stack(db_url, space=space, cron="* * * * *", now=minute - dt.timedelta(seconds=1)).trigger_uid
        for _ in range(30)
    ]
    assert cron_recorder.record_due(now=now, beat_id="test-bulk") >= 30
    mine = {m.pk for uid in uids for m in matches_of(db_url, uid)}
    sent = broker.sent()
    assert len(mine) == 30 and mine <= {args[0] for _, args in sent}
    assert {name for name, _ in sent} == {dispatch.DELIVER_CRON_MATCH}
    assert len(broker.producers) == 1  # message by message took one producer per match


def test_a_broker_failure_is_a_warning_left_to_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on port 1: every publish fails (after Celery's own publish retries).
    down = _private_app(f"tkd{uuid.uuid4().hex[:10]}", broker_url="redis://127.0.0.1:1/0")
    monkeypatch.setattr(dispatch, "app", down)
    try:
        with caplog.at_level(logging.WARNING, logger=dispatch.log.name):
            started = time.monotonic()
            assert dispatch.deliver_cron_matches(list(range(1, 1001))) == 0
            # The first failure stops the send: one message's retries, not a thousand.
            assert time.monotonic() - started < 15
            dispatch.deliver_cron_match(1)  # the single send does not raise either
    finally:
        down.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "bulk dispatch failed; 1000 of 1000 messages left to the sweep",
        "dispatch failed; left to the sweep",
    ]
    assert warnings[0].unsent == 1000 and warnings[1].task_args == (1,)


def test_operations_go_to_the_control_queue_and_tenant_work_does_not(broker: Broker) -> None:
    """docs/spec/host-features.md#hf-newcomer: only the control process consumes ``{namespace}.control``."""
    namespace = broker.queue_key.split(":", 1)[0]
    control_key = f"{namespace}:{namespace}.control"
    validation_key = f"{namespace}:{namespace}.validation"
    dispatch.reconcile_operation("op-1")
    dispatch.validate_version("op-2")
    dispatch.run_context(7)
    dispatch.deliver_cron_match(8)
    controlled = [json.loads(m)["headers"]["task"] for m in broker.client.lrange(control_key, 0, -1)]
    assert controlled == [dispatch.RECONCILE_OPERATION]
    validated = [json.loads(m)["headers"]["task"] for m in broker.client.lrange(validation_key, 0, -1)]
    assert validated == [dispatch.VALIDATE_VERSION]  # tenant code at validation: not the control queue
    assert broker.sent() == [(dispatch.RUN_CONTEXT, [7]), (dispatch.DELIVER_CRON_MATCH, [8])]
