"""Host wall-clock limits on tenant code (docs/spec/host-limits.md#hl-decisions "Host limits"; docs/spec/cron-trigger.md#cr-handler): a ``scheduled``
handler over ``scheduled_timeout_s`` and a Version import over ``validation_timeout_s`` are killed
and proven dead, and recorded as failures with their reason; a handler over its limit is a failed
run that is never retried within that match.

The code appends to a file in the test's ``tmp_path`` (inside ``TAKOHOST_TEST_SANDBOX_SHARED_DIR``)
every few milliseconds; "it stopped writing" is how the test sees from outside that it is dead.
Real Postgres (own database), Redis and sandbox children; deliveries run in the test process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time

import pytest

from core import config
from models import db as models_db
from models import resources as res_models
from services import redis_client, redis_keys
from tests.integration.test_cron_support import at, create_stack, decide, deliveries_of, matches_of
from workers import cron_tasks
from workers.sandbox import validation as sandbox_validation

LOOPING = {
    "sync-loop": """
import time
def scheduled(event, env, ctx):
    while True:
        with open(env.OUT, "a") as f:
            f.write("x")
        time.sleep(0.02)
""",
    "endless-wait-until": """
import asyncio
async def forever(path):
    while True:
        with open(path, "a") as f:
            f.write("x")
        await asyncio.sleep(0.02)
def scheduled(event, env, ctx):
    ctx.wait_until(forever(env.OUT))
""",
}


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return -1


def _assert_stopped_writing(path, *, quiet: float = 1.0) -> None:
    before = _size(path)
    assert before > 0, "the tenant code never wrote its file"
    time.sleep(quiet)
    assert _size(path) == before, "the tenant code is still running"


@pytest.mark.parametrize("kind", sorted(LOOPING))
def test_a_handler_over_its_limit_is_killed_and_one_failed_run(
    db_url, space_token, zygote, captured, tmp_path, kind
) -> None:
    space = space_token[0]
    out = tmp_path / "ticks"
    minute = {"endless-wait-until": "2030-06-01T10:05:00Z", "sync-loop": "2030-06-01T10:10:00Z"}[kind]
    stack = create_stack(
        db_url,
        space=space,
        cron="*/5 * * * *",
        source=LOOPING[kind],
        variables={"OUT": str(out)},
        now=at(minute) - dt.timedelta(seconds=30),
    )
    [(match_pk, _)] = decide(
        db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid]
    )
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=1.5)
    started = time.monotonic()
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "failed"
    assert 1.5 <= time.monotonic() - started < 10
    _assert_stopped_writing(out)
    [delivery] = deliveries_of(db_url, match_pk)
    assert delivery.outcome == "failed"
    assert delivery.error == "the scheduled handler did not finish within 1.5 s; it was stopped"
    # Proven dead: the lease is gone (not left to expire), and the match is finished for good.
    client = redis_client.client(settings.redis_url)
    assert client.exists(redis_keys.delivery_lease_key(settings.namespace, match_pk)) == 0
    assert [m.state for m in matches_of(db_url, stack.trigger_uid)] == ["done"]
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "done"
    cron_tasks.sweep(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert match_pk not in captured
    assert len(deliveries_of(db_url, match_pk)) == 1


def test_a_handler_within_its_limit_is_untouched(db_url, space_token, zygote, tmp_path) -> None:
    space = space_token[0]
    source = "import time\ndef scheduled(event, env, ctx):\n    time.sleep(1.0)\n"
    minute = "2030-06-01T10:15:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=source, now=at(minute) - dt.timedelta(seconds=30)
    )
    [(match_pk, _)] = decide(
        db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid]
    )
    settings = dataclasses.replace(config.load_settings(), scheduled_timeout_s=5.0)
    assert cron_tasks.deliver(match_pk, settings=settings, zygote=zygote) == "ok"


def test_a_version_import_over_its_limit_is_killed(tmp_path) -> None:
    out = tmp_path / "import-ticks"
    source = f"import time\nwhile True:\n    open({str(out)!r}, 'a').write('x')\n    time.sleep(0.02)\n"
    spec = {"mainModule": "main.py", "modules": {"main.py": source}}
    settings = dataclasses.replace(config.load_settings(), validation_timeout_s=1.5)
    started = time.monotonic()
    validation = sandbox_validation.validate_spec(spec, settings=settings)  # the Operations path's call
    assert 1.5 <= time.monotonic() - started < 10
    assert validation.error == "importing main.py did not finish within 1.5 s"
    assert validation.observed == {"validated": False, "error": validation.error}
    _assert_stopped_writing(out)


def test_no_delivery_starts_while_its_trigger_is_being_deleted(db_url, space_token, zygote, captured) -> None:
    space = space_token[0]
    minute = "2030-06-01T10:20:00Z"
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at(minute) - dt.timedelta(seconds=30))
    [(match_pk, _)] = decide(
        db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid]
    )
    with models_db.session_scope(db_url) as session:
        session.get(res_models.Resource, stack.trigger_uid).phase = "deleting"  # a DELETE was accepted
    assert cron_tasks.deliver(match_pk, zygote=zygote) == "deferred"
    assert deliveries_of(db_url, match_pk) == []
    assert cron_tasks.deliveries_stopped(stack.trigger_uid, now=dt.datetime.now(dt.UTC))
    with models_db.session_scope(db_url) as session:
        trigger = session.get(res_models.Resource, stack.trigger_uid)
        trigger.deleted_at = trigger.updated_at  # the DELETE applied: the match is still owed
    assert cron_tasks.deliver(match_pk, zygote=zygote) == "ok"
