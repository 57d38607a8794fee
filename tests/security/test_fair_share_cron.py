"""Fair share covers cron deliveries too (README "Production", ``TAKOHOST_SPACE_MAX_CONTEXTS``).

A hostile tenant's attack, as it was run against a real host: Space A deploys cron triggers
whose ``scheduled`` handler blocks (``time.sleep(75)`` then), and while they ran they held both
worker slots of a fleet capped at one context per Space; Space B's one-step instance stayed
``queued`` for 4 minutes. Deliveries did not take a Space slot (only replay contexts did).

Here: real API and two solo workers (two slots) on a private database and namespace, on default
settings: the cap follows the live fleet's two slots, so it is 1 (``services.fleet``).
Two of A's matches are recorded and sent at once; their handler blocks until the test lets it
go. B's instance must complete while they hold on; only one of A's handlers runs; once it is
let go, the released slot is handed to A's deferred delivery, which then runs (nothing lost).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
import uuid

import pytest

from core import config
from models import db as models_db
from services import celery_app, dispatch, tokens
from tests.integration.test_cron_support import create_stack, decide, deliveries_of
from tests.security.test_fair_share import ONE
from tests.support import workflows

CAP = 1  # max(1, 2 live slots - 1 kept for other Spaces)

BLOCKING_HANDLER = """
import os, time
def scheduled(event, env, ctx):
    marker = os.path.join(env.DIR, env.NAME)
    open(marker, "w").close()
    while not os.path.exists(os.path.join(env.DIR, "go")):
        time.sleep(0.05)
"""


@pytest.fixture()
def stack():
    with workflows.private_stack(
        workers=2, worker_pool="solo", beat=False, lease_ttl_ms=3000,
    ) as s:
        yield s


def _send_deliveries(stack: workflows.Stack, match_pks: list[int]) -> None:
    settings = dataclasses.replace(config.load_settings(), namespace=stack.namespace)
    app = celery_app.make_celery(settings)
    with app.producer_or_acquire() as producer:
        for pk in match_pks:
            app.send_task(dispatch.DELIVER_CRON_MATCH, args=[pk], queue=settings.queue, producer=producer)


def test_a_space_s_blocking_cron_handlers_do_not_hold_another_space_s_slots(stack, tmp_path):
    shared = tmp_path / "cron"
    shared.mkdir()
    shared.chmod(0o777)
    now = dt.datetime.now(dt.UTC)
    minute = now.replace(second=0, microsecond=0)
    # Two triggers of Space A, each with its match of the current minute, recorded as the beat does.
    matches = []
    for name in ("hog-1", "hog-2"):
        trigger = create_stack(stack.db_url, space=stack.space, cron="* * * * *", source=BLOCKING_HANDLER,
                               variables={"DIR": str(shared), "NAME": name}, now=minute - dt.timedelta(seconds=1))
        recorded = decide(stack.db_url, now=minute + dt.timedelta(seconds=1), triggers=[trigger.trigger_uid])
        assert len(recorded) == 1, recorded
        matches.append(recorded[0][0])

    space_b = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        token_b = tokens.create_token_txn(session, space=space_b)
    one_b = workflows.deploy(stack.db_url, space=space_b, source=ONE, class_name="One")
    http_b = workflows.HttpInstances(stack.api_url, token_b, space_b, one_b.workflow)

    _send_deliveries(stack, matches)
    markers = lambda: [p for p in shared.iterdir() if p.name != "go"]  # noqa: E731
    workflows.wait_until(markers, timeout=60, message="one of A's handlers runs")
    time.sleep(2.0)  # the other delivery reaches the other worker slot, and is deferred there
    assert len(markers()) == CAP, "both of A's handlers run: the delivery took no Space slot"

    code, answer = http_b.call("POST", "", {"id": "b-1"}, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert code == 201, answer
    started = time.monotonic()
    workflows.wait_until(lambda: http_b.status("b-1")["status"] == "complete", timeout=30,
                         message="Space B's instance completes beside A's blocking handler")
    print(f"B complete in {time.monotonic() - started:.2f} s while A's handler blocks")
    assert len(markers()) == 1

    (shared / "go").write_text("go")
    workflows.wait_until(lambda: len(markers()) == 2, timeout=30,
                         message="the released slot is handed to A's deferred delivery")
    for pk in matches:
        workflows.wait_until(lambda pk=pk: [d.outcome for d in deliveries_of(stack.db_url, pk)] == ["ok"],
                             timeout=30, message=f"match {pk} delivered once, ok")
