"""Delivering recorded matches through the real sandbox, Postgres and Redis (docs/spec/cron-trigger.md "一致ごとに
at-least-once"; docs/spec/cron-trigger.md#cr-handler, docs/spec/cron-trigger.md#cr-runs; CB-03, CB-04). The task body runs in-process; the sweep's
dispatches are captured instead of sent."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from core import config
from models import cron as cron_models
from models import db as models_db
from services import redis_client, redis_keys
from tests.integration.test_cron_support import (
    RAISING_HANDLER,
    at,
    create_stack,
    decide,
    delete_trigger,
    deliveries_of,
    matches_of,
)
from workers import cron_tasks


def _ms(text: str) -> int:
    return int(at(text).timestamp() * 1000)


def _record(
    db_url: str,
    space: str,
    *,
    source: str | None = None,
    deployment: bool = True,
    minute: str = "2030-03-04T10:05:00Z",
    expression: str = "*/5 * * * *",
) -> tuple[str, int]:
    kwargs = {"source": source} if source else {}
    stack = create_stack(
        db_url,
        space=space,
        cron=expression,
        now=at(minute) - dt.timedelta(seconds=30),
        deployment=deployment,
        variables={"EXPECTED": {"cron": expression, "scheduledTime": _ms(minute)}},
        **kwargs,
    )
    recorded = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert len(recorded) == 1
    return stack.trigger_uid, recorded[0][0]


def test_delivery_calls_scheduled_with_the_exact_event_once(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space)
    assert cron_tasks.deliver(match_pk) == "ok"  # the handler asserts event == EXPECTED (int ms)
    deliveries = deliveries_of(db_url, match_pk)
    assert [(d.outcome, d.error) for d in deliveries] == [("ok", None)]
    assert deliveries[0].finished_at >= deliveries[0].started_at and deliveries[0].version_uid
    assert cron_tasks.deliver(match_pk) == "done"  # nothing more is owed
    assert len(deliveries_of(db_url, match_pk)) == 1


def test_CB_04_raising_handler_is_one_failed_run_and_never_retried(
    db_url: str, space_token: tuple[str, str], captured: list[int]
) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space, source=RAISING_HANDLER)
    assert cron_tasks.deliver(match_pk) == "failed"
    [delivery] = deliveries_of(db_url, match_pk)
    assert delivery.outcome == "failed" and "RuntimeError" in delivery.error and "boom" in delivery.error
    assert cron_tasks.deliver(match_pk) == "done"
    cron_tasks.sweep(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert match_pk not in captured
    assert len(deliveries_of(db_url, match_pk)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio\nasync def scheduled(event, env, ctx):\n    await asyncio.sleep(0)\n"
        "    raise ValueError('async boom')\n",
        "import asyncio\nasync def fail():\n    raise KeyError('later')\n"
        "def scheduled(event, env, ctx):\n    ctx.wait_until(fail())\n",
        "def scheduled(event, env, ctx):\n    ctx.wait_until(lambda: 1 / 0)\n",
    ],
    ids=["rejected-awaitable", "failed-wait-until-awaitable", "failed-wait-until-callable"],
)
def test_failed_awaitable_or_wait_until_is_a_failed_run(
    db_url: str, space_token: tuple[str, str], source: str
) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space, source=source)
    assert cron_tasks.deliver(match_pk) == "failed"
    assert deliveries_of(db_url, match_pk)[0].outcome == "failed"


def test_wait_until_work_finishes_before_the_delivery_is_ok(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    source = (
        "import asyncio\nasync def later():\n    await asyncio.sleep(0.05)\n"
        "async def scheduled(event, env, ctx):\n    ctx.wait_until(later())\n"
    )
    _, match_pk = _record(db_url, space, source=source)
    assert cron_tasks.deliver(match_pk) == "ok"


def test_recorded_match_is_delivered_after_its_trigger_was_deleted(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    trigger_uid, match_pk = _record(db_url, space)
    delete_trigger(db_url, trigger_uid=trigger_uid, now=at("2030-03-04T10:05:00.200Z"))
    assert cron_tasks.deliver(match_pk) == "ok"


def test_worker_without_deployment_is_a_failed_run(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space, deployment=False)
    assert cron_tasks.deliver(match_pk) == "failed"
    assert "no live WorkerDeployment" in deliveries_of(db_url, match_pk)[0].error


def test_a_held_lease_means_someone_else_is_delivering(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space)
    settings = config.load_settings()
    client = redis_client.client(settings.redis_url)
    key = redis_keys.delivery_lease_key(settings.namespace, match_pk)
    assert key.startswith(f"{settings.namespace}:cronlease:")
    client.set(key, "other-worker", px=10_000)
    try:
        assert cron_tasks.deliver(match_pk) == "busy"
        assert deliveries_of(db_url, match_pk) == []
    finally:
        client.delete(key)


def test_CB_03_vanished_delivery_is_redelivered_with_the_identical_event(
    db_url: str, space_token: tuple[str, str], captured: list[int]
) -> None:
    space, _ = space_token
    _, match_pk = _record(db_url, space)
    # A worker took the lease, wrote its delivery row and died (its lease expired).
    with models_db.session_scope(db_url) as session:
        session.add(
            cron_models.CronDelivery(
                match_pk=match_pk, worker_id="dead:1", started_at=at("2030-03-04T10:05:00.300Z")
            )
        )
    now = dt.datetime.now(dt.UTC)
    assert cron_tasks.sweep(now=now) >= 1 and match_pk in captured
    [vanished] = deliveries_of(db_url, match_pk)
    assert vanished.outcome == "unknown" and vanished.finished_at == now
    assert cron_tasks.deliver(match_pk) == "ok"  # the handler checks event == EXPECTED again
    assert [d.outcome for d in deliveries_of(db_url, match_pk)] == ["unknown", "ok"]
    assert len(matches_of(db_url, _trigger_of(db_url, match_pk))) == 1


def _trigger_of(db_url: str, match_pk: int) -> str:
    with models_db.session_scope(db_url) as session:
        return session.get(cron_models.CronMatch, match_pk).trigger_uid


def test_sweep_leaves_running_deliveries_alone_and_resends_lost_messages_later(
    db_url: str, space_token: tuple[str, str], captured: list[int]
) -> None:
    space, _ = space_token
    _, running = _record(db_url, space, minute="2030-03-04T11:05:00Z")
    _, lost = _record(db_url, space, minute="2030-03-04T11:10:00Z")
    settings = config.load_settings()
    client = redis_client.client(settings.redis_url)
    key = redis_keys.delivery_lease_key(settings.namespace, running)
    client.set(key, "live-worker", px=30_000)
    with models_db.session_scope(db_url) as session:
        session.add(cron_models.CronDelivery(match_pk=running, worker_id="live-worker"))
        session.execute(
            sa.update(cron_models.CronMatch)
            .where(cron_models.CronMatch.pk == lost)
            .values(dispatched_at=at("2030-03-04T11:10:00.100Z"))
        )
    try:
        cron_tasks.sweep(now=at("2030-03-04T11:10:10Z"))  # too early to resend the lost message
        assert running not in captured and lost not in captured
        cron_tasks.sweep(now=at("2030-03-04T11:10:00.100Z") + cron_tasks.REDISPATCH_AFTER)
        assert running not in captured and lost in captured
        assert [d.outcome for d in deliveries_of(db_url, running)] == [None]
    finally:
        client.delete(key)


def test_a_scheduled_handler_reaches_public_addresses_and_its_connections_are_logged(
    db_url: str, space_token: tuple[str, str]
) -> None:
    """Public egress from a ``scheduled`` handler, through the same sandbox and egress proxy as a
    workflow's steps (docs/egress.md); the run's logs keep the connection and the refusal."""
    import psycopg

    from tests.support import egress as net

    address = net.public_address()
    space, _ = space_token
    handler = (
        "import urllib.request\n"
        "def scheduled(event, env, ctx):\n"
        f"    urllib.request.urlopen('http://{address}/cron', timeout=10).read()\n"
        "    try:\n"
        "        urllib.request.urlopen('http://10.0.0.5/', timeout=10)\n"
        "    except OSError as exc:\n"
        "        print('refused:', exc)\n"
    )
    with net.http_server(address) as seen:
        _, match_pk = _record(db_url, space, source=handler)
        assert cron_tasks.deliver(match_pk) == "ok"
    assert seen == [f"{address}/cron"]
    [delivery] = deliveries_of(db_url, match_pk)
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        rows = conn.execute(
            "SELECT stream, message FROM tenant_logs WHERE delivery_pk = %s ORDER BY seq", (delivery.pk,)
        ).fetchall()
    assert any(s == "host" and m.startswith(f"egress {address}:80: sent ") for s, m in rows), rows
    assert ("host", "egress 10.0.0.5:80 refused: private address") not in rows  # the runtime refused it first
    assert any(s == "stdout" and "egress to 10.0.0.5:80 refused: private address" in m for s, m in rows), rows
