"""Record due cron matches, then dispatch their deliveries (beat duty; docs/spec/cron-trigger.md#cr-grammar, docs/spec/cron-trigger.md#cr-runs).

One tick: claim due schedule rows (``next_due_at <= now``) with ``FOR UPDATE SKIP LOCKED`` so
two beats never work on the same row, apply each row's ``cron_plan.plan`` — match rows
(``INSERT … ON CONFLICT DO NOTHING RETURNING``: the unique ``(trigger_uid, scheduled_time)``
makes a duplicate impossible even without the lock), skip rows, the advanced boundary — in
one transaction per batch of rows, commit, and only then dispatch the new matches. A crash
between commit and dispatch leaves ``pending`` matches that ``workers.cron_tasks.sweep``
dispatches; nothing depends on which beat is active.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy import orm

from beat import cron_plan
from core import config, cron
from models import cron_sql, resource_sql
from models import db as models_db
from models.base import utcnow
from services import dispatch
from services.telemetry import metrics

log = logging.getLogger(__name__)

#: Schedule rows claimed and applied per transaction.
BATCH_SIZE = 500
#: Exit status of a beat stopped by the ``TAKOHOST_TEST_BEAT_EXIT_AFTER_RECORD`` fault hook.
FAULT_EXIT_STATUS = 17
#: ``beat_ticks.name`` of the scheduler loop.
TICK_NAME = "beat"


#: A forward clock jump between two ticks of one beat shorter than this is not named as one.
CLOCK_JUMP_MIN = dt.timedelta(seconds=5)


@dataclasses.dataclass(frozen=True)
class OwnTicks:
    """This beat process's own view of its ticks (``cron_plan.Ticks``): its first tick
    (``running_since``), its previous tick (``previous``, wall clock) and a forward
    ``clock_jump`` since then (the wall clock moved this much more than real time), if any."""

    running_since: dt.datetime
    previous: dt.datetime | None
    clock_jump: dt.timedelta | None


class _OwnTickClock:
    """Remembers this process's previous tick (wall and monotonic time)."""

    def __init__(self) -> None:
        self.first: dt.datetime | None = None
        self.last: tuple[dt.datetime, float] | None = None

    def advance(self, *, now: dt.datetime, monotonic: float) -> OwnTicks:
        """Note a tick at wall-clock ``now`` / ``monotonic`` seconds; returns the view before it."""
        previous = self.last
        self.first = self.first or now
        self.last = (now, monotonic)
        jump = None
        if previous is not None:
            excess = (now - previous[0]) - dt.timedelta(seconds=monotonic - previous[1])
            jump = excess if excess >= CLOCK_JUMP_MIN else None
        return OwnTicks(
            running_since=self.first, previous=None if previous is None else previous[0], clock_jump=jump
        )


_own_ticks = _OwnTickClock()


def record_due(*, now: dt.datetime, beat_id: str | None = None, batch_size: int = BATCH_SIZE) -> int:
    """Beat duty: decide every due match up to now; returns how many matches it dispatched.

    Opens its own sessions: one transaction per batch of at most ``batch_size`` schedules, each
    deciding at ``max(now, clock)`` so that ``recorded_at`` is the real recording instant and the
    60 s rule holds for late batches too. Every batch is committed before the first dispatch of
    ``takohost.deliver_cron_match`` (dispatching is slower than recording, and recording is what
    the 60 s rule is about); all matches are then sent in one bulk send
    (``dispatch.deliver_cron_matches``), and those the broker refused are left to the sweep.
    ``beat_id`` names this beat in ``beat_ticks`` (default ``host:pid``).
    """
    settings = config.load_settings()
    beat_id = beat_id or f"{socket.gethostname()}:{os.getpid()}"
    previous_tick = note_tick(now=now, beat_id=beat_id, url=settings.database_url)
    own = _own_ticks.advance(now=now, monotonic=time.monotonic())
    started = time.perf_counter()
    recorded: list[tuple[int, str]] = []
    while True:
        with models_db.session_scope(settings.database_url) as session:
            claimed, batch = record_batch_txn(
                session, now=max(now, utcnow()), previous_tick=previous_tick, limit=batch_size, own=own
            )
        recorded.extend(batch)
        if claimed < batch_size:
            break
    if not recorded:
        return 0
    if settings.test_beat_exit_after_record in {trigger for _, trigger in recorded}:
        log.warning("fault hook: beat exits after recording, before dispatch")
        logging.shutdown()
        os._exit(FAULT_EXIT_STATUS)
    committed = time.perf_counter()
    # One producer and pipelined writes for the whole minute: sending message by message held
    # the beat loop (timers, sweeps) for seconds when a minute had thousands of matches.
    sent = dispatch.deliver_cron_matches([match_pk for match_pk, _trigger in recorded])
    log.info(
        "recorded %d cron matches in %.0f ms, dispatched %d in %.0f ms",
        len(recorded),
        (committed - started) * 1000,
        sent,
        (time.perf_counter() - committed) * 1000,
    )
    return len(recorded)


def record_batch_txn(
    session: orm.Session,
    *,
    now: dt.datetime,
    previous_tick: dt.datetime | None,
    limit: int,
    trigger_uids: Collection[str] | None = None,
    own: OwnTicks | None = None,
) -> tuple[int, list[tuple[int, str]]]:
    """Claim up to ``limit`` due schedules and apply their plans in the caller's transaction.

    ``own`` (this beat process's own ticks, :class:`OwnTicks`) lets a skip say truly why: a
    clock jump, a late beat, or no beat at all (docs/spec/host-features.md#hf-newcomer).

    Returns ``(rows claimed, [(match_pk, trigger_uid) of newly recorded matches])``; the caller
    commits, then dispatches. Rows locked by another beat are skipped (``SKIP LOCKED``).
    ``trigger_uids`` restricts the claim to those triggers (tests and tools; beat passes None).
    """
    rows = cron_sql.claim_due_schedules_txn(session, now=now, limit=limit, trigger_uids=trigger_uids)
    matches: list[dict] = []
    skips: list[dict] = []
    updates: list[dict] = []
    for row in rows:
        try:
            plan = cron_plan.plan(
                segments=segments_of(row),
                considered_until=row.considered_until,
                now=now,
                previous_tick=previous_tick,
                running_since=own.running_since if own else None,
                own_previous_tick=own.previous if own else None,
                clock_jump=own.clock_jump if own else None,
            )
        except cron.CronSyntaxError:
            # Stored expressions were validated before side effects; never wedge the beat on one.
            log.exception(
                "unparsable stored cron expression; schedule parked", extra={"trigger": row.trigger_uid}
            )
            updates.append({"trigger_uid": row.trigger_uid, "next_due_at": None})
            continue
        for decision in plan.decisions:
            if decision.record:
                matches.append(
                    {
                        "trigger_uid": row.trigger_uid,
                        "space": row.space,
                        "worker_uid": row.worker_uid,
                        "cron": decision.cron,
                        "scheduled_time": decision.scheduled_time,
                        "recorded_at": now,
                        "dispatched_at": now,
                        "state": "pending",
                    }
                )
            else:
                skips.append(
                    {
                        "trigger_uid": row.trigger_uid,
                        "cron": decision.cron,
                        "scheduled_time": decision.scheduled_time,
                        "reason": decision.reason,
                        "recorded_at": now,
                    }
                )
        updates.append(
            {
                "trigger_uid": row.trigger_uid,
                "considered_until": plan.considered_until,
                "next_due_at": plan.next_due_at,
                # `remaining` ends with the current expression whenever it is not empty.
                "superseded": [
                    {"cron": s.cron, "until": s.end.isoformat()} for s in plan.remaining[:-1] if s.end is not None
                ]
                or None,
            }
        )
    # Executemany forms (one cached statement, rows sent in pages), not one giant VALUES list.
    recorded = cron_sql.record_matches_txn(session, matches)
    if matches:
        for match in matches if metrics.enabled() else ():
            metrics.observe(
                "takohost_cron_record_lateness_seconds",
                (match["recorded_at"] - match["scheduled_time"]).total_seconds(),
            )
        if len(recorded) < len(matches):
            log.info("some matches were already recorded", extra={"duplicates": len(matches) - len(recorded)})
    cron_sql.record_skips_txn(session, skips)
    cron_sql.advance_schedules_txn(session, updates)
    moved = {
        row.trigger_uid: (row.cron, update["considered_until"])
        for row, update in zip(rows, updates, strict=True)
        if row.deleted_at is None and update.get("considered_until") is not None
    }
    if moved:
        observe_next_match_txn(session, moved=moved, now=now)
    return len(rows), recorded


def observe_next_match_txn(
    session: orm.Session, *, moved: dict[str, tuple[str, dt.datetime]], now: dt.datetime
) -> int:
    """Move each trigger's ``observed.nextMatchAt`` past the matches beat just decided (docs/spec/host-features.md#hf-newcomer
    item 7; docs/spec/cron-trigger.md#cr-observed "次回一致を計算できた場合のみ nextMatchAt"), with ``observedAt = now``.

    ``moved`` maps a trigger UID to ``(its current expression, the instant matches were decided
    up to)``; ``nextMatchAt`` becomes the first match of that expression strictly after that
    instant (dropped when there is none). A trigger whose ``observed`` shows another expression
    (its PUT is being reconciled: the Operation writes ``observed`` itself) or whose row an
    Operation holds right now (``SKIP LOCKED``) is left alone. Runs in the caller's
    transaction; returns how many triggers were written.
    """
    rows = resource_sql.lock_observed_txn(session, uids=moved)
    writes = []
    for uid, observed in rows:
        expression, decided_until = moved[uid]
        if not observed or observed.get("cron") != expression:
            continue
        upcoming = cron.next_match(cron.parse(expression), decided_until)
        fresh = {k: v for k, v in observed.items() if k != "nextMatchAt"}
        if upcoming is not None:
            fresh["nextMatchAt"] = cron.format_rfc3339(upcoming)
        if fresh != observed:
            writes.append({"uid": uid, "observed": fresh, "observed_at": now})
    resource_sql.write_observed_txn(session, writes=writes)
    return len(writes)


def segments_of(row: sa.Row) -> list[cron_plan.Segment]:
    """The row's expressions as plan segments: each superseded one up to its ``until``, then the
    current one up to ``deleted_at`` (open while the trigger lives)."""
    segments = [
        cron_plan.Segment(cron=item["cron"], end=dt.datetime.fromisoformat(item["until"]))
        for item in row.superseded or []
    ]
    end = row.deleted_at
    if end is not None and segments and segments[-1].end is not None and end < segments[-1].end:
        end = segments[-1].end  # clock skew between hosts: never let a segment end before its start
    segments.append(cron_plan.Segment(cron=row.cron, end=end))
    return segments


def note_tick(*, now: dt.datetime, beat_id: str | None, url: str | None = None) -> dt.datetime | None:
    """Store ``now`` as the latest beat tick; returns the previous latest tick (None: first ever)."""
    with models_db.session_scope(url) as session:
        return cron_sql.note_tick_txn(session, name=TICK_NAME, now=now, beat_id=beat_id)


def next_due_at(*, url: str | None = None) -> dt.datetime | None:
    """The earliest ``next_due_at`` of all schedules (None: nothing scheduled); lets beat wake
    right at a match instead of up to a tick later."""
    with models_db.session_scope(url) as session:
        return cron_sql.next_due_at_txn(session)
