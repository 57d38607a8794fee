"""Cron delivery: the ``takohost.deliver_cron_match`` task and the undelivered-match sweep.

docs/spec/cron-trigger.md#cr-delivery, docs/spec/cron-trigger.md#cr-failure: once a match is recorded the Host
owes at least one handler call; a raised error, a failed awaitable or a failed ``wait_until`` is a failed run,
never retried for that reason; a delivery whose worker died is delivered again with the identical event
(CB-03).

A delivery holds the Redis lease ``{namespace}:cronlease:{match_pk}`` (``SET NX PX``) from
before its ``cron_deliveries`` row is written until after that row is finished. The process's
heartbeat (``workers.sandbox.heartbeat``, the one that keeps replay contexts alive) renews it and
pings the delivery's child only while that lease is fresh, so the child's watchdog kills it
before the lease can expire. So "unfinished delivery row and no lease" proves the
worker vanished and no handler of it runs: the sweep finishes such a delivery ``unknown`` and
dispatches the match again, and a trigger's DELETE (:func:`deliveries_stopped`) can prove the stop.

Host limits (docs/spec/host-limits.md#hl-decisions): one handler call may run ``TAKOHOST_SCHEDULED_TIMEOUT_S`` seconds
(default 900) from its spawn; over it the child is SIGKILLed, proven dead, and the delivery is a
failed run, never retried within that match (docs/spec/cron-trigger.md). A running delivery reads its trigger's
DELETE fence every ``FENCE_POLL_S`` seconds and stops the same way. The job and the binding
answers are ``workers.sandbox.jobs``'s, shared with replay contexts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import os
import socket
import time

from core import config
from models import cron_sql
from models import db as models_db
from models.base import utcnow
from services import cron_runs, dispatch, redis_client, redis_keys
from services.celery_app import app
from services.telemetry import metrics
from takohost.runtime import protocol, tracebacks
from workers import sandbox, tenant_logs
from workers.engine import store
from workers.sandbox import heartbeat, jobs, receive
from workers.sandbox import lease as lease_mod
from workers.sandbox.session import Session

log = logging.getLogger(__name__)

#: A pending match with no running delivery is dispatched again after this long (a message
#: lost between commit and broker, a beat that died before dispatching, an infrastructure error).
REDISPATCH_AFTER = dt.timedelta(seconds=30)
#: Pending matches examined per sweep query.
SWEEP_BATCH = 500
#: Seconds between two reads of the DELETE fence by a running delivery (the bound on how long a
#: handler outlives the acceptance of its trigger's DELETE, plus the kill).
FENCE_POLL_S = 1.0


def worker_id() -> str:
    """This worker process: ``{hostname}:{pid}``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class DeliveryJob:
    """What one started delivery runs: the match's ``scheduled`` event and the picked Version.

    ``event`` is ``{"cron", "scheduledTime"}`` (UTC epoch milliseconds; docs/spec/cron-trigger.md#cr-handler);
    ``version`` a ``jobs.VersionChoice``, or a ``NoVersion`` whose ``problem`` is the
    failed run's error (no live Deployment, say).
    """

    delivery_pk: int
    match_pk: int
    trigger_uid: str
    space: str
    event: dict
    version: jobs.VersionChoice | jobs.NoVersion


@dataclasses.dataclass(frozen=True)
class Run:
    """How a handler run ended: ``outcome`` is ``ok`` or ``failed`` (recorded, the match is done),
    ``lease_lost`` or ``host`` (recorded ``unknown``; the match is delivered again); ``error`` the
    text for the runs listing; ``traceback``: the tenant's frames of a failed handler
    (``takohost.runtime.tracebacks``; for the run's logs)."""

    outcome: str
    error: str | None
    traceback: list | None = None


@app.task(name=dispatch.DELIVER_CRON_MATCH, acks_late=True, ignore_result=True)
def deliver_cron_match(match_pk: int) -> str:
    """Celery task ``takohost.deliver_cron_match``: deliver recorded match ``match_pk`` once.

    Returns what happened (``ok``, ``failed``, ``done``: nothing owed, ``busy``: another delivery
    holds the lease, ``deferred``: its trigger is being deleted or its Space runs
    ``settings.space_max_contexts`` contexts and deliveries already, ``error``: an infrastructure
    failure left the match for the sweep).
    """
    return deliver(int(match_pk))


def deliver(
    match_pk: int, *, settings: config.Settings | None = None, zygote: sandbox.Zygote | None = None
) -> str:
    """Deliver match ``match_pk``: lease, delivery row, ``scheduled`` in the sandbox, outcome.

    The lease is taken before the delivery row is written and released after it is finished and
    the child is proven dead (not proven: the lease is left to expire after the child's
    watchdog). The lease takes a slot of the match's Space under ``settings.space_max_contexts``
    (fair share, as a replay context's: ``lease.LeaseStore.admit_delivery``); over the cap nothing
    starts (``deferred``: the match stays pending, a released slot or the sweep sends it again).
    While the match's trigger is being deleted no delivery starts (``deferred`` too). An infrastructure failure (database, sandbox
    start) or a lost lease finishes the delivery ``unknown`` and leaves the match ``pending`` for
    the sweep; a handler failure, a handler over ``settings.scheduled_timeout_s`` and a handler
    stopped by its trigger's DELETE finish it ``failed`` (docs/spec/cron-trigger.md: never retried for that).
    ``zygote`` defaults to the process's (``sandbox.get_zygote()``).
    """
    settings = settings or config.load_settings()
    space = None
    if settings.space_max_contexts > 0:
        with models_db.session_scope(settings.database_url) as session:
            space = cron_sql.match_space_txn(session, match_pk=match_pk)
        if space is None:
            return "done"
    leases = lease_mod.store_for_settings(settings)
    lease = leases.admit_delivery(
        match_pk, space=space, cap=settings.space_max_contexts, reserved=settings.space_reserved_slots
    )
    if lease == lease_mod.BUSY:
        return "busy"
    if lease == lease_mod.DEFERRED:
        return "deferred"  # its Space's slots are taken: a release hands it one (or the sweep)
    assert isinstance(lease, lease_mod.DeliveryLease)
    beat = heartbeat.heartbeat_for(
        leases=leases, url=settings.database_url, read_epochs=store.backend_for(settings.database_url).read_epochs
    )
    run_session = Session(leases=leases, beat=beat, lease=lease)
    run_session.watch(heartbeat.Watched.delivery(lease))
    try:
        job = _start(match_pk, settings=settings)
        if isinstance(job, str):
            return job
        log.info(
            "delivering cron match",
            extra={
                "match": match_pk,
                "delivery": job.delivery_pk,
                "event": job.event,
                "version": job.version.uid,
            },
        )
        metrics.observe(
            "takohost_cron_delivery_start_lateness_seconds", time.time() - job.event["scheduledTime"] / 1000
        )
        try:
            if isinstance(job.version, jobs.NoVersion):
                run = Run("failed", job.version.problem)
            else:
                run = run_scheduled(
                    job, settings=settings, zygote=zygote or sandbox.get_zygote(), session=run_session
                )
        except Exception:
            log.exception("cron delivery infrastructure failure", extra={"match": match_pk})
            run = Run("host", cron_runs.HOST_ERROR)
        if run.outcome == "lease_lost":
            metrics.inc("takohost_lease_losses_total", kind="cron")
        with models_db.session_scope(settings.database_url) as session:
            if run.outcome in ("ok", "failed"):
                cron_sql.finish_delivery_txn(
                    session, delivery_pk=job.delivery_pk, outcome=run.outcome, error=run.error, now=utcnow()
                )
            else:
                cron_sql.mark_vanished_txn(
                    session,
                    delivery_pks=[job.delivery_pk],
                    now=utcnow(),
                    error=run.error or cron_runs.HOST_ERROR,
                )
        return run.outcome if run.outcome in ("ok", "failed") else "error"
    finally:
        run_session.release()  # never renewed again; not proven: the session left it to expire


def _start(match_pk: int, *, settings: config.Settings) -> DeliveryJob | str:
    """Claim the match, pick the Version and write the delivery row, in one transaction;
    ``"done"`` when nothing is owed, ``"deferred"`` while its trigger is being deleted."""
    with models_db.session_scope(settings.database_url) as session:
        match = cron_runs.claim_match_txn(session, match_pk=match_pk, now=utcnow())
        if match is None:
            return "done"
        if cron_runs.trigger_stopping_txn(session, trigger_uid=match.trigger_uid, lock=True):
            return "deferred"
        version = jobs.choose_version(
            cron_runs.deployment_spec_txn(session, worker_uid=match.worker_uid),
            load=functools.partial(cron_runs.version_spec_txn, session),
        )
        delivery_pk = cron_sql.insert_delivery_txn(
            session, match_pk=match_pk, worker_id=worker_id(), version_uid=version.uid, now=utcnow()
        )
    return DeliveryJob(
        delivery_pk=delivery_pk,
        match_pk=match_pk,
        trigger_uid=match.trigger_uid,
        space=match.space,
        event=match.event,
        version=version,
    )


def run_scheduled(job: DeliveryJob, *, settings: config.Settings, zygote: sandbox.Zygote, session: Session) -> Run:
    """Run the picked Version's ``scheduled(event, env, ctx)`` in a sandbox child (docs/spec/cron-trigger.md#cr-handler, docs/spec/host-limits.md#hl-decisions).

    The job is ``jobs.job_message(kind="scheduled")``; binding calls are answered by
    ``jobs.answer_binding`` (the workflow path's answers). The run ends ``ok``, or
    ``failed`` with the reason: a raised error, a failed awaitable or ``wait_until``, a missing
    handler, a child that died or broke the protocol, the wall-clock limit
    ``settings.scheduled_timeout_s`` (seconds from the spawn; :func:`cron_runs.timed_out`), or the
    trigger's DELETE (checked every ``FENCE_POLL_S`` seconds; ``cron_runs.STOPPED_BY_DELETE``).
    ``session`` holds the delivery's lease, watched by the heartbeat, which pings the child while
    the lease is fresh (and kills it when the lease is lost); the run's logs and child join it.
    A lost lease or a child killed by its watchdog because the host withheld its pings ends it
    ``lease_lost``/``host``. In every case the child is SIGKILLed and proven dead before this
    returns (not proven: ``session`` drops the lease, which is then left to expire). Raises
    ``sandbox.ZygoteUnavailable`` (or ``ChildGone``/``TimeoutError``) when no child could be
    started: a host failure.
    """
    assert isinstance(job.version, jobs.VersionChoice)
    watchdog = jobs.watchdog_seconds(settings.lease_ttl_ms)
    message = jobs.job_message(
        kind="scheduled", version=job.version, event=job.event, watchdog_seconds=watchdog
    )
    deadline = time.monotonic() + settings.scheduled_timeout_s
    # The run's tenant output (docs/spec/host-features.md#hf-observability): created before the spawn, so the host's budget starts first.
    logs = tenant_logs.LogCollector(
        connection=lambda: models_db.connection_for(settings.database_url), delivery_pk=job.delivery_pk
    )
    session.space, session.logs = job.space, logs
    with metrics.timed("takohost_sandbox_spawn_seconds", kind="scheduled"):
        session.attach(zygote.spawn(message, space=job.space))
    run: Run | None = None
    try:
        run = _serve(session, job=job, settings=settings, deadline=deadline)
    finally:
        # The lease stays renewed until the delivery row is finished (deliver's release).
        proven = session.stop_child(keep_alive=True)
        if run is not None and run.outcome != "ok" and run.error:
            text = f"run failed: {run.error}"
            if run.traceback:
                text += "\nTraceback (the Version's frames, innermost last):\n" + tracebacks.format_frames(run.traceback)
            logs.host_line(text)
        logs.flush()
    assert session.watched is not None
    if run.outcome == "gone" and session.watched.ping_gap() >= heartbeat.WATCHDOG_SUSPECT * watchdog:
        log.warning(
            "cron handler lost to its watchdog; the match is delivered again", extra={"match": job.match_pk}
        )
        run = Run("host", cron_runs.HOST_ERROR)
    elif run.outcome == "gone":
        run = Run("failed", run.error)
    if not proven:
        log.error("cron handler not proven dead; its lease is left to expire", extra={"match": job.match_pk})
    return run


class _Ended(Exception):
    """Internal: a check between two frames ended the run (``run`` says how)."""

    def __init__(self, run: Run) -> None:
        super().__init__(run.outcome)
        self.run = run


#: What a child that vanished without a result becomes (before the watchdog judgement).
_GONE = "the handler process exited without a result (os._exit, a signal or a crash)"


def _serve(session: Session, *, job: DeliveryJob, settings: config.Settings, deadline: float) -> Run:
    """The parent's loop for one handler child: answers, limit, fence, lease, ``log`` frames
    (see run_scheduled); the frames come through ``Session.receive``, the loop every tenant run
    shares."""
    assert isinstance(job.version, jobs.VersionChoice)
    child, watched = session.child, session.watched
    assert child is not None and watched is not None
    next_fence = time.monotonic() + FENCE_POLL_S

    def poll() -> float:
        """The limit, the lease and the DELETE fence (raises :class:`_Ended`); waits ≤ 1 s."""
        nonlocal next_fence
        now = time.monotonic()
        if now >= deadline:
            raise _Ended(Run("failed", cron_runs.timed_out(settings.scheduled_timeout_s)))
        if watched.lost:
            raise _Ended(Run("lease_lost", cron_runs.LEASE_LOST))
        if now >= next_fence:
            if _stopping(job.trigger_uid, settings=settings):
                raise _Ended(Run("failed", cron_runs.STOPPED_BY_DELETE))
            next_fence = time.monotonic() + FENCE_POLL_S
        return max(0.0, min(next_fence, now + 1.0) - now)

    while True:
        try:
            reply = session.receive(deadline=deadline, poll=poll)
        except _Ended as ended:
            return ended.run
        except receive.Overtime:
            return Run("failed", cron_runs.timed_out(settings.scheduled_timeout_s))
        except sandbox.ChildGone:
            return _gone(watched)
        except receive.Violation as exc:
            return Run("failed", f"the handler process broke the protocol: {exc}")
        if reply["op"] == "scheduled_done":
            if reply.get("ok") is True:
                return Run("ok", None)
            return _failed_run(reply)
        if reply["op"] != "binding":
            return Run("failed", f"the handler process sent an unexpected {reply['op']!r} message")
        try:
            answer = jobs.answer_binding(reply, space=job.space, bindings=job.version.bindings)
        except jobs.UnknownBinding as exc:
            return Run("failed", f"the handler process broke the protocol: {exc}")
        if reply["call"] == "create" and answer["op"] == "binding_result":
            _note_started(job, workflow_uid=job.version.bindings[reply["binding"]], answer=answer, settings=settings)
        try:
            child.send(answer)
        except sandbox.ChildGone:
            return _gone(watched)


def _gone(watched: heartbeat.Watched) -> Run:
    """A child that vanished: killed by the heartbeat because the lease was lost (``lease_lost``:
    delivered again), else ``gone`` (the watchdog judgement in :func:`run_scheduled`)."""
    if watched.lost:
        return Run("lease_lost", cron_runs.LEASE_LOST)
    return Run("gone", _GONE)


def _note_started(job: DeliveryJob, *, workflow_uid: str, answer: dict, settings: config.Settings) -> None:
    """Record the instance a ``create`` binding call of the handler started, for the runs
    ledger's ``instances`` (docs/spec/cron-trigger.md#cr-runs). Diagnostics only: a failed write
    is logged and the run goes on (the instance exists either way)."""
    try:
        with models_db.session_scope(settings.database_url) as session:
            cron_sql.note_started_txn(
                session,
                delivery_pk=job.delivery_pk,
                workflow_uid=workflow_uid,
                instance_id=answer["value"]["id"],
                now=utcnow(),
            )
    except Exception:  # noqa: BLE001 - the link is lost, not the run
        log.warning(
            "could not record the instance a cron handler started", extra={"match": job.match_pk}, exc_info=True
        )


def _failed_run(reply: dict) -> Run:
    """The failed run of a ``scheduled_done {ok: false}``: its message with the Version file and
    line (the ledger's ``error``); the traceback of the tenant's frames goes to the run's logs."""
    text = protocol.safe_text(reply.get("message") or "the handler failed")
    frames = tracebacks.clean_frames(reply.get("traceback")) or []
    where = tracebacks.location(frames)
    if where is not None and not text.endswith(f"({where})"):
        text = f"{text} ({where})"
    if frames:
        return Run("failed", text, traceback=frames)
    return Run("failed", text)


def _stopping(trigger_uid: str, *, settings: config.Settings) -> bool:
    """The DELETE fence of a running delivery; a failed read is "not stopping" (logged): a
    database blip must not kill a healthy handler, the next check decides."""
    try:
        with models_db.session_scope(settings.database_url) as session:
            return cron_runs.trigger_stopping_txn(session, trigger_uid=trigger_uid)
    except Exception:  # noqa: BLE001 - checked again FENCE_POLL_S later
        log.warning(
            "could not read the delete fence of a cron trigger", extra={"trigger": trigger_uid}, exc_info=True
        )
        return False


def deliveries_stopped(
    trigger_uid: str, *, now: dt.datetime, settings: config.Settings | None = None
) -> bool:
    """True once no delivery of ``trigger_uid``'s matches runs (the DELETE's stop proof, docs/spec/cron-trigger.md#cr-runs).

    An unfinished delivery whose lease is gone belonged to a vanished worker (its child died by
    its watchdog before the lease expired): it is finished ``unknown`` here, and its match stays
    owed. One with a live lease is still stopping (its loop sees the fence within
    ``FENCE_POLL_S``): False. Raises ``redis.RedisError``/database errors (the caller retries).
    """
    settings = settings or config.load_settings()
    with models_db.session_scope(settings.database_url) as session:
        running = cron_sql.running_deliveries_txn(session, trigger_uid=trigger_uid)
    if not running:
        return True
    held = redis_client.client(settings.redis_url).mget(
        [redis_keys.delivery_lease_key(settings.namespace, m) for m, _ in running]
    )
    vanished = [d for (_, d), holder in zip(running, held, strict=True) if holder is None]
    if vanished:
        with models_db.session_scope(settings.database_url) as session:
            cron_sql.mark_vanished_txn(session, delivery_pks=vanished, now=now, error=cron_runs.VANISHED)
    return len(vanished) == len(running)


def sweep(*, now: dt.datetime) -> int:
    """Beat duty: dispatch again every recorded match that is owed a delivery; returns how many.

    A pending match whose unfinished delivery has no live lease (its worker vanished) gets that
    delivery finished ``unknown`` and is dispatched now; a pending match with no running
    delivery is dispatched again once ``REDISPATCH_AFTER`` has passed since its last dispatch.
    Matches with a live lease are left alone. Opens its own sessions; dispatches after commit.
    """
    settings = config.load_settings()
    client = redis_client.client(settings.redis_url)
    dispatched = 0
    after_pk = 0
    while True:
        with models_db.session_scope(settings.database_url) as session:
            pending = cron_sql.pending_matches_txn(session, limit=SWEEP_BATCH, after_pk=after_pk)
        if not pending:
            return dispatched
        after_pk = pending[-1].pk
        leased = client.mget([redis_keys.delivery_lease_key(settings.namespace, m.pk) for m in pending])
        vanished: list[int] = []
        again: list[int] = []
        for match, holder in zip(pending, leased, strict=True):
            if holder is not None:
                continue
            if match.unfinished_delivery_pks:
                vanished.extend(match.unfinished_delivery_pks)
                again.append(match.pk)
            elif match.dispatched_at is None or now - match.dispatched_at >= REDISPATCH_AFTER:
                again.append(match.pk)
        if again:
            with models_db.session_scope(settings.database_url) as session:
                cron_sql.mark_vanished_txn(session, delivery_pks=vanished, now=now, error=cron_runs.VANISHED)
                cron_sql.note_dispatched_txn(session, match_pks=again, now=now)
            started = time.perf_counter()
            sent = dispatch.deliver_cron_matches(again)
            log.info(
                "cron sweep dispatched %d matches again in %.0f ms",
                sent,
                (time.perf_counter() - started) * 1000,
                extra={"matches": again, "vanished": vanished},
            )
            dispatched += len(again)
        if len(pending) < SWEEP_BATCH:
            return dispatched
