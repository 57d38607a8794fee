"""Fair share between Spaces (docs/spec/host-features.md#hf-isolation; docs/spec/architecture.md#ar-shape "A replay context is one Celery task
execution"; README "Production", ``TAKOHOST_SPACE_MAX_CONTEXTS``).

Real API, two solo workers (two worker slots) and a beat on a private database and namespace,
with a per-Space cap of 1 concurrent replay context (``TAKOHOST_SPACE_MAX_CONTEXTS=1``, set for
these processes only). Space A holds ``SPINNERS`` (≥ the worker slots) instances whose effect is
``while True: pass`` and then floods ``FLOOD`` creates; Space B's one-step instance must still
complete within ``SLACK_SECONDS`` of its unloaded time, measured in the same test on the same
processes. Without the cap the spinners hold every worker slot and B stays ``queued`` for good
(before the change: B not complete after 45 s, both spinners running).

Then the harder case: 1,000 messages for A's deferred instances sent at once with B's create right
behind them in the FIFO queue (deferral must be cheap), and finally the proof that deferral loses
nothing: once the spinners are terminated, A's releasing contexts hand their slot on one after
another.

Both figures are printed (``-s``) as one JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from services import celery_app, dispatch, tokens
from tests.support import workflows

SPINNERS = 2  # ≥ worker slots (two solo workers of concurrency 1)
FLOOD = 1000
CAP = 1
SLACK_SECONDS = 5.0
#: After the spinners are terminated: this many flood instances must complete within the window
#: (at a cap of 1 and a 1 s sweep interval, the sweep alone would start about one per second).
HANDOFF_WINDOW_SECONDS = 10.0
HANDED_ON_AT_LEAST = 40
#: B's create sent right behind 1,000 messages of A's deferred instances may wait, beyond the
#: slack, this much per message for them to be deferred by the one free worker slot (measured
#: here: 2.5–4 ms a message on a shared 2-core machine with one core taken by the spinner; in a
#: full CI run beside three other test processes the 1,000 drained in 21 s and B waited 12.1 s,
#: over a 5 ms budget's 10.2 s). Without deferral B never starts; the budget only bounds its cost.
DEFERRAL_BUDGET_MS = 15.0
#: How long the loaded instance is followed before the test gives up (to report a figure).
GIVE_UP_SECONDS = 40.0

SPIN = """
class Spin:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def spin():
            open(event["params"]["marker"], "w").close()
            while True:
                pass
        return step.do("spin", spin)
"""

ONE = """
class One:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("one", lambda: {"ok": True})
"""


@pytest.fixture()
def stack():
    with workflows.private_stack(
        workers=2, worker_pool="solo", lease_ttl_ms=3000, extra_env={"TAKOHOST_SPACE_MAX_CONTEXTS": str(CAP)}
    ) as s:
        yield s


def _create(http: workflows.HttpInstances, instance_id: str, params: dict | None = None) -> None:
    body: dict = {"id": instance_id}
    if params is not None:
        body["params"] = params
    code, answer = http.call("POST", "", body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert code == 201, answer


def _time_to_complete(http: workflows.HttpInstances, instance_id: str, *, give_up: float) -> float:
    """Seconds from the create call to ``complete`` (``inf`` if not complete after ``give_up``)."""
    started = time.monotonic()
    _create(http, instance_id)
    while time.monotonic() - started < give_up:
        status = http.status(instance_id)["status"]
        if status == "complete":
            return time.monotonic() - started
        assert status in ("queued", "running"), status
        time.sleep(0.02)
    return float("inf")


def _queue_depth(namespace: str) -> int:
    client = redis.Redis.from_url(config.load_settings().redis_url)
    return int(client.llen(f"{namespace}:{namespace}.tasks"))


def _pks(db_url: str, workflow: str) -> list[int]:
    table = inst_models.Instance.__table__
    with models_db.session_scope(db_url) as session:
        return list(session.scalars(sa.select(table.c.pk).where(table.c.workflow_uid == workflow)))


def _completed(db_url: str, workflow: str) -> int:
    table = inst_models.Instance.__table__
    with models_db.session_scope(db_url) as session:
        return session.scalar(
            sa.select(sa.func.count())
            .where(table.c.workflow_uid == workflow, table.c.status == "complete")
        )


def _send_run_contexts(stack: workflows.Stack, pks: list[int]) -> None:
    """One ``takohost.run_context`` message per pk on the stack's queue, in one bulk publish."""
    settings = dataclasses.replace(config.load_settings(), namespace=stack.namespace)
    app = celery_app.make_celery(settings)
    with app.producer_or_acquire() as producer:
        for pk in pks:
            app.send_task(dispatch.RUN_CONTEXT, args=[pk], queue=settings.queue, producer=producer)


def _wait_drained(namespace: str, timeout: float = 60.0) -> float:
    """The monotonic time at which the stack's queue was first seen empty."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _queue_depth(namespace) == 0:
            return time.monotonic()
        time.sleep(0.02)
    return float("inf")


def test_a_spinning_and_flooding_space_does_not_delay_another(stack, tmp_path):
    space_b = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        token_b = tokens.create_token_txn(session, space=space_b)
    spin = workflows.deploy(stack.db_url, space=stack.space, source=SPIN, class_name="Spin")
    flood = workflows.deploy(stack.db_url, space=stack.space, source=ONE, class_name="One")
    one_b = workflows.deploy(stack.db_url, space=space_b, source=ONE, class_name="One")
    http_spin = stack.instances(spin.workflow)
    http_flood = stack.instances(flood.workflow)
    http_b = workflows.HttpInstances(stack.api_url, token_b, space_b, one_b.workflow)

    # Unloaded: one warm-up (Version cache, connections), then the median of three.
    assert _time_to_complete(http_b, "warm", give_up=30) < 30
    unloaded = statistics.median(
        _time_to_complete(http_b, f"unloaded-{i}", give_up=30) for i in range(3)
    )

    markers = [tmp_path / f"spin-{i}" for i in range(SPINNERS)]
    for i, marker in enumerate(markers):
        _create(http_spin, f"spin-{i}", {"marker": str(marker)})
    workflows.wait_until(lambda: any(m.exists() for m in markers), timeout=60, message="a spinner runs")
    time.sleep(1.0)  # the other spinner(s) start too, or are deferred
    spinning = sum(m.exists() for m in markers)

    flood_started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: _create(http_flood, f"flood-{i}"), range(FLOOD)))
    flood_seconds = time.monotonic() - flood_started
    depth = _queue_depth(stack.namespace)

    loaded = _time_to_complete(http_b, "loaded", give_up=unloaded + SLACK_SECONDS + GIVE_UP_SECONDS)
    # (the figure before the change: not complete after the whole give-up time, ``inf``)
    drained_after = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _queue_depth(stack.namespace) == 0:
            drained_after = time.monotonic() - flood_started - flood_seconds
            break
        time.sleep(0.05)
    # Harder: 1,000 messages for A's deferred instances sent at once (what a sweep without the
    # per-Space slot check would send), B's create right behind them in the FIFO queue.
    flood_pks = _pks(stack.db_url, flood.workflow)
    resent = time.monotonic()
    _send_run_contexts(stack, flood_pks)
    behind = _time_to_complete(http_b, "behind", give_up=unloaded + SLACK_SECONDS + GIVE_UP_SECONDS)
    deferred_drained = _wait_drained(stack.namespace) - resent
    # The cap defers, it does not drop: once A's spinners are terminated, its finishing contexts
    # hand their slot on one after another (far faster than the 1 s sweep alone could).
    for i in range(SPINNERS):
        code, answer = http_spin.call("POST", f"/spin-{i}/terminate", {})
        assert code == 200 and answer == {"status": "terminated"}, answer
    freed = time.monotonic()
    time.sleep(HANDOFF_WINDOW_SECONDS)
    completed = _completed(stack.db_url, flood.workflow)
    figures = {
        "unloaded_s": round(unloaded, 3),
        "loaded_s": round(loaded, 3),
        "bound_s": round(unloaded + SLACK_SECONDS, 3),
        "behind_bound_s": round(unloaded + SLACK_SECONDS + FLOOD * DEFERRAL_BUDGET_MS / 1000, 3),
        "spinners": SPINNERS,
        "spinning_at_once": spinning,
        "flood": FLOOD,
        "flood_create_s": round(flood_seconds, 3),
        "queue_depth_after_flood": depth,
        "queue_drained_s_after_flood": None if drained_after is None else round(drained_after, 3),
        "resent": len(flood_pks),
        "behind_resent_s": round(behind, 3),
        "resent_drained_s": round(deferred_drained, 3),
        "flood_completed_in_window": completed,
        "window_s": round(time.monotonic() - freed, 3),
        "cap": CAP,
    }
    print("fair-share " + json.dumps(figures))
    assert loaded <= unloaded + SLACK_SECONDS, figures
    assert behind <= unloaded + SLACK_SECONDS + FLOOD * DEFERRAL_BUDGET_MS / 1000, figures
    assert spinning <= CAP, figures
    assert completed >= HANDED_ON_AT_LEAST, figures  # the cap held: the other spinner waits, queued
