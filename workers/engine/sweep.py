"""Re-dispatch runnable instances that no context owns (docs/spec/architecture.md#ar-shape: "losing Redis loses no
accepted data (a sweep re-dispatches from Postgres)"; docs/spec/architecture.md#ar-beat "Beat").

Beat calls :func:`sweep` every ``settings.sweep_interval_s``. Runnable = ``queued``/``running``,
not being stopped, no retry delay pending (no ``retry`` timer), its DurableWorkflow not closed,
untouched for a grace period (so a context dispatched a moment ago is not sent twice), and
**no live lease** in Redis; with a per-Space cap, no more than the Space's free slots
(``workers.sandbox.lease``, docs/spec/host-features.md#hf-isolation). That covers a SIGKILLed worker (its lease expires), a lost broker
message and a flushed Redis (no lease, no queue). A duplicate dispatch is harmless: the lease
(``SET NX``) and the epoch fence let only one context commit.

The same beat duty also runs the instance housekeeping that has no duty of its own: interrupted
terminations (:func:`finish_terminations`), the retention purge of terminal instances
(``services.retention``) and the periodic ``observed`` of DurableWorkflows
(``services.workflow_observer``). Each is isolated: one failing never stops the others.
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instance_sql, status_counts
from models import instances as inst_models
from services import dispatch, instance_stop, leases, retention, workflow_observer
from workers.sandbox import lease as lease_mod

log = logging.getLogger(__name__)

BATCH = 1000
#: With a per-Space cap, at most this many (or the cap, if larger) candidates of one Space a sweep.
PER_SPACE = 100
MIN_GRACE_SECONDS = 5.0

INSTANCES = inst_models.Instance.__table__
TIMERS = inst_models.Timer.__table__
CLOSURES = inst_models.WorkflowClosure.__table__


def _candidates(cutoff: dt.datetime, *, per_space: int = 0) -> sa.Select:
    """``(pk, space)`` of the runnable instances untouched since ``cutoff``, oldest first, at most
    ``BATCH``; ``per_space`` > 0 → at most that many of each Space (so one Space's backlog of
    deferred instances cannot hide another Space's orphan from the sweep)."""
    retry = sa.select(TIMERS.c.pk).where(TIMERS.c.instance_pk == INSTANCES.c.pk, TIMERS.c.kind == "retry")
    closed = sa.select(CLOSURES.c.workflow_uid).where(CLOSURES.c.workflow_uid == INSTANCES.c.workflow_uid)
    conditions = (
        INSTANCES.c.status.in_(("queued", "running")),
        INSTANCES.c.stopping.is_(None),
        INSTANCES.c.updated_at < cutoff,
        ~retry.exists(),
        ~closed.exists(),
    )
    if per_space <= 0:
        return (
            sa.select(INSTANCES.c.pk, INSTANCES.c.space)
            .where(*conditions)
            .order_by(INSTANCES.c.updated_at)
            .limit(BATCH)
        )
    rank = sa.func.row_number().over(partition_by=INSTANCES.c.space, order_by=INSTANCES.c.updated_at)
    ranked = (
        sa.select(INSTANCES.c.pk, INSTANCES.c.space, INSTANCES.c.updated_at, rank.label("rank"))
        .where(*conditions)
        .subquery()
    )
    return (
        sa.select(ranked.c.pk, ranked.c.space)
        .where(ranked.c.rank <= per_space)
        .order_by(ranked.c.updated_at)
        .limit(BATCH)
    )


def admissible(
    orphans: list[tuple[int, str]], *, cap: int, running: dict[str, int]
) -> tuple[list[int], dict[str, list[int]]]:
    """Split ``orphans`` (``(pk, space)``, oldest first) into the pks to dispatch now — per Space at
    most its free slots (``cap`` − ``running[space]``; all of them when ``cap`` ≤ 0) — and
    ``{space: [pk, ...]}`` left waiting for a slot (docs/spec/host-features.md#hf-isolation)."""
    if cap <= 0:
        return [pk for pk, _ in orphans], {}
    free = {space: max(0, cap - running.get(space, 0)) for _, space in orphans}
    now: list[int] = []
    waiting: dict[str, list[int]] = {}
    for pk, space in orphans:
        if free[space] > 0:
            free[space] -= 1
            now.append(pk)
        else:
            waiting.setdefault(space, []).append(pk)
    return now, waiting


def _stopping(cutoff: dt.datetime) -> sa.Select:
    return (
        sa.select(INSTANCES.c.pk)
        .where(
            INSTANCES.c.stopping == "terminate",
            INSTANCES.c.status.in_(("queued", "running", "sleeping", "waiting")),
            INSTANCES.c.updated_at < cutoff,
        )
        .order_by(INSTANCES.c.updated_at)
        .limit(BATCH)
    )


def grace_seconds(settings: config.Settings) -> float:
    """How long an instance must be untouched before the sweep considers it: two sweep intervals,
    at least 5 s."""
    return max(MIN_GRACE_SECONDS, 2 * settings.sweep_interval_s)


def finish_terminations(*, now: dt.datetime, settings: config.Settings) -> int:
    """Publish ``terminated`` for instances whose ``terminate`` was interrupted (the caller got
    ``backend_unavailable`` and did not call again) once no lease proves a context still runs."""
    cutoff = now - dt.timedelta(seconds=grace_seconds(settings))
    with models_db.session_scope() as session:
        stopping = session.scalars(_stopping(cutoff)).all()
    if not stopping:
        return 0
    live = leases.live_leases(list(stopping), settings=settings)
    done = 0
    for pk in stopping:
        if pk not in live:
            instance_stop.finish_termination(pk, now=now)
            done += 1
    return done


def housekeeping(*, now: dt.datetime) -> int:
    """Retention purge, the fold of instance-count deltas (``models.status_counts.compact``) and
    DurableWorkflow observation (see the module doc); returns how many rows were purged, folded
    or re-observed. Logs and swallows the failure of each."""
    done = 0
    for duty in (retention.purge_retired, status_counts.compact, workflow_observer.refresh):
        try:
            done += duty(now=now)
        except Exception:  # noqa: BLE001 - the next sweep tries again
            log.exception("sweep housekeeping %s failed", duty.__qualname__)
    return done


def sweep(*, now: dt.datetime) -> int:
    """Dispatch a replay context for every runnable instance without a live lease (and finish
    interrupted terminations, :func:`finish_terminations`; then :func:`housekeeping`); returns how
    many were handled.

    The dispatched rows get ``updated_at = now`` so the next sweep waits a grace period before
    trying them again (an instance that cannot run yet, e.g. no Deployment, is retried at that
    pace). Redis unreachable → nothing dispatched this time (logged).

    Fair share (``settings.space_max_contexts`` > 0): each Space is sent at most its free slots
    (the cap, ``lease.LeaseStore.space_cap`` of the live fleet, minus its live leases, :func:`admissible`); its other orphans are (re-)recorded as
    waiting, untouched, so that a finishing context of that Space hands them a slot — a deferred
    backlog is not re-sent every sweep, and a lost hand-off is repaired here."""
    settings = config.load_settings()
    housekeeping(now=now)
    cutoff = now - dt.timedelta(seconds=grace_seconds(settings))
    cap = settings.space_max_contexts
    with models_db.session_scope() as session:
        rows = session.execute(_candidates(cutoff, per_space=max(cap, PER_SPACE) if cap > 0 else 0)).all()
    candidates = [pk for pk, _ in rows]
    try:
        finished = finish_terminations(now=now, settings=settings)
        live = leases.live_leases(candidates, settings=settings)
        orphaned = [(pk, space) for pk, space in rows if pk not in live]
        running: dict[str, int] = {}
        if orphaned and cap > 0:
            store = lease_mod.store_for_settings(settings)
            cap = store.space_cap(cap, reserved=settings.space_reserved_slots)  # what admission applies now: it follows the live fleet
            running = store.running(space for _, space in orphaned)
        orphans, waiting = admissible(orphaned, cap=cap, running=running)
        if waiting:
            store.note_waiting(waiting)
    except Exception:  # noqa: BLE001 - Redis down: nothing can be dispatched now anyway
        log.warning("sweep skipped: lease store unreachable", exc_info=True)
        return 0
    if not orphans:
        return finished
    with models_db.session_scope() as session:
        session.connection().exec_driver_sql(instance_sql.TOUCH_RUNNABLE, {"pks": list(orphans), "now": now})
    dispatch.run_contexts(orphans)  # one producer, pipelined writes
    log.info("sweep re-dispatched instances", extra={"count": len(orphans)})
    return len(orphans) + finished
