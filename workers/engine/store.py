"""Fenced commits of a replay context (docs/spec/architecture.md#ar-shape, docs/spec/architecture.md#ar-context "One replay context" points 3, 5–7).

Every write a context makes is conditional on its fencing token: ``UPDATE instances … WHERE pk =
%(pk)s AND epoch = %(epoch)s``. A commit that matches no row raises :class:`Fenced`: someone
(a newer context, terminate, delete) bumped the epoch, so this context kills its child and stops.
History events are appended in the same statement or transaction as the state they record
(docs/spec/durable-workflow.md#dw-history), numbered from ``instances.next_event_id``.

Speed (docs/performance.md): the hot commits (an attempt's outcome, a sleep) are ONE statement in
autocommit mode whose data-modifying CTEs all hang off the fenced ``UPDATE`` (``… FROM f``), so a
step costs one round trip and one commit. Commits that must read what a concurrent ``send_event``
just committed (the inbox) run as a short transaction instead, pipelined into two round trips: the
fenced ``UPDATE`` takes the instance row lock first, and the next statement's fresh READ COMMITTED
snapshot sees everything committed before the lock was granted. The terminal commit is one
statement that detects (by ``next_sequence``) an event committed while it waited for the lock and
purges it too. The epoch bump at context start uses a second connection without synchronous commit
(see ``models.db.connection_for``). Raw psycopg on one connection per process and URL; the statements
are ``models.instance_sql`` (shared with the instance services), the schema ``models.instances``
(names and types are bytea UTF-8, documents ``json``).

Raw psycopg rather than SQLAlchemy Core because it is faster on the per-step path
(``bench/store_bench.py``: the same statement through a SQLAlchemy connection costs about twice
the round trips and time per step; the earlier Core store, a transaction of separate statements,
about five times). This is the engine's only store: there is one database, Postgres (also under
``takohost dev``). The context talks to a :class:`Backend` (reads) and its :class:`ContextStore`
(fenced writes).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from typing import Any

import psycopg

from models import db as models_db
from models import instance_sql
from takohost.domain import commits, decide, history


class Fenced(Exception):
    """The instance's epoch moved on: this context's token is stale and it must stop."""


_json = instance_sql.document




def _name(value: bytes | memoryview | str) -> str:
    return value if isinstance(value, str) else bytes(value).decode("utf-8")




@dataclasses.dataclass(frozen=True)
class InstanceSnapshot:
    """What a context needs to know about its instance before it takes the token."""

    pk: int
    status: str
    stopping: str | None
    workflow_uid: str
    space: str
    instance_id: str
    params: dict | None
    lifetime_ends_at: dt.datetime
    workflow_spec: dict
    workflow_live: bool
    deployment_spec: dict | None
    closed: bool


def load_instance(conn: psycopg.Connection, pk: int) -> InstanceSnapshot | None:
    """The instance, its DurableWorkflow's spec and its Worker's live Deployment (``None``: gone)."""
    row = conn.execute(instance_sql.SELECT_CONTEXT_START, {"pk": pk}).fetchone()
    if row is None:
        return None
    status, stopping, workflow_uid, space, instance_id, params, lifetime, spec, live, deployment, closed = row
    return InstanceSnapshot(
        pk=pk,
        status=status,
        stopping=stopping,
        workflow_uid=workflow_uid,
        space=space,
        instance_id=_name(instance_id),
        params=params,
        lifetime_ends_at=lifetime,
        workflow_spec=spec if isinstance(spec, dict) else json.loads(spec),
        workflow_live=live,
        deployment_spec=deployment,
        closed=closed,
    )


def load_version(conn: psycopg.Connection, version_uid: str) -> dict | None:
    """A WorkerVersion's spec (``None`` if there is no such Version)."""
    row = conn.execute(instance_sql.SELECT_VERSION_SPEC, {"uid": version_uid}).fetchone()
    return None if row is None else row[0]


class Backend:
    """Reads of a context and its :class:`ContextStore` (raw psycopg, this process's connections
    to ``url``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._epoch_conn: psycopg.Connection | None = None
        self._epoch_pid = 0

    def load_instance(self, pk: int) -> InstanceSnapshot | None:
        """See :func:`load_instance`."""
        return load_instance(models_db.connection_for(self.url), pk)

    def load_version(self, version_uid: str) -> dict | None:
        """See :func:`load_version`."""
        return load_version(models_db.connection_for(self.url), version_uid)

    def context_store(self, *, pk: int, lifetime_ends_at: dt.datetime) -> ContextStore:
        """The fenced writes of one context of instance ``pk``."""
        return ContextStore(
            models_db.connection_for(self.url),
            pk=pk,
            lifetime_ends_at=lifetime_ends_at,
            start_conn=models_db.connection_for(self.url, synchronous_commit=False),
        )

    def read_epochs(self, pks: list[int]) -> dict[int, int]:
        """The stored epoch of each instance, on a connection of its own (the heartbeat thread's)."""
        conn = self._epoch_conn
        if conn is None or conn.closed or conn.broken or self._epoch_pid != os.getpid():
            conn = self._epoch_conn = psycopg.connect(**models_db.connect_kwargs(self.url), autocommit=True)
            self._epoch_pid = os.getpid()
        return dict(conn.execute(instance_sql.SELECT_EPOCHS, {"pks": pks}).fetchall())

    def discard(self) -> None:
        """Drop this process's connections after an unexpected error."""
        models_db.discard_connection(self.url)


_backends: dict[tuple[int, str], Backend] = {}


def backend_for(url: str) -> Backend:
    """This process's store backend for ``url`` (a SQLAlchemy ``postgresql+psycopg://`` URL)."""
    key = (os.getpid(), url)
    backend = _backends.get(key)
    if backend is None:
        backend = _backends[key] = Backend(url)
    return backend


class ContextStore:
    """The fenced writes of one replay context of instance ``pk`` holding token ``epoch``."""

    def __init__(
        self,
        conn: psycopg.Connection,
        *,
        pk: int,
        lifetime_ends_at: dt.datetime,
        start_conn: psycopg.Connection | None = None,
    ) -> None:
        self.conn = conn
        self.start_conn = start_conn or conn
        self.pk = pk
        self.epoch: int | None = None
        self.lifetime_ends_at = lifetime_ends_at

    # -- start ------------------------------------------------------------------------------------
    def start(self, *, version_uid: str | None, now: dt.datetime) -> bool:
        """Take the fencing token: ``epoch + 1`` and status ``running`` if the instance is runnable
        (queued/running, not stopping, no retry delay pending, UID not closed); appends
        ``ContextStarted`` (its ``versionUid`` null when no Version can run it: the lifetime still
        ends it). False when the instance is not runnable now."""
        row = self.start_conn.execute(
            instance_sql.START_CONTEXT,
            {"pk": self.pk, "version": version_uid, "version_json": instance_sql.json_value(version_uid), "now": now},
        ).fetchone()
        if row is None:
            return False
        self.epoch = row[0]
        return True

    def is_fenced(self) -> bool:
        """True when the stored epoch is no longer this context's token (or the row is gone)."""
        row = self.conn.execute(instance_sql.SELECT_EPOCH, {"pk": self.pk}).fetchone()
        return row is None or row[0] != self.epoch

    def load_steps(self) -> dict[str, decide.StepRecord]:
        """Every stored step of the instance by name (read once per context)."""
        steps = {}
        for name, kind, state, attempts, result, error, config, wake_at, timeout_at in self.conn.execute(
            instance_sql.SELECT_STEPS, {"pk": self.pk}
        ):
            name = _name(name)
            steps[name] = decide.StepRecord(
                name=name,
                kind=kind,
                state=state,
                attempts=attempts,
                result=result,
                error=error,
                config=config,
                wake_at=wake_at,
                timeout_at=timeout_at,
            )
        return steps

    # -- the step commits (plans built by ``commits``) ----------------------------------------------
    def commit_attempt(
        self,
        *,
        name: str,
        run: decide.RunEffect,
        started_at: dt.datetime,
        outcome: decide.Outcome,
        now: dt.datetime,
    ) -> None:
        """Record the finished attempt ``run`` of ``step.do(name)`` (``commits.attempt``). Raises
        :class:`Fenced`."""
        commit = commits.attempt(
            name=name, run=run, started_at=started_at, outcome=outcome, lifetime_ends_at=self.lifetime_ends_at
        )
        self.apply(commit, now=now)

    def commit_sleep_completed(
        self, *, name: str, seconds: int | None, wake_at: dt.datetime, new: bool, now: dt.datetime
    ) -> None:
        """Record a completed sleep (``commits.sleep_completed``). Raises :class:`Fenced`."""
        self.apply(commits.sleep_completed(name=name, seconds=seconds, wake_at=wake_at, new=new), now=now)

    def commit_suspend(
        self, *, suspend: decide.Suspend, name: str, seconds: int | None, now: dt.datetime
    ) -> None:
        """After the child is dead: ``sleeping``, or ``running`` with a retry timer
        (``commits.suspend``). Raises :class:`Fenced`."""
        self.apply(commits.suspend(suspend=suspend, name=name, seconds=seconds), now=now)

    # -- applying commit plans ---------------------------------------------------------------------
    def _params(self, now: dt.datetime, **extra: Any) -> dict[str, Any]:
        return {"pk": self.pk, "epoch": self.epoch, "now": now, **extra}

    def apply(self, commit: commits.Commit, *, now: dt.datetime) -> None:
        """Apply a commit plan as ONE fenced autocommit statement: the instance ``UPDATE`` and,
        hanging off it (``… FROM f``), the step upsert, the timer upsert and the history rows.
        Raises :class:`Fenced`. Only for commits that read nothing a concurrent ``send_event`` may
        just have written (the inbox): the statement's snapshot predates a lock wait."""
        events = commit.events
        stamps = history.stamps(events, now=now)
        params = self._params(
            now,
            n=len(events),
            new=commit.new_steps,
            status=commit.status,
            newest=stamps[-1] if stamps else None,
        )
        parts = [
            instance_sql.LOCK_ROW_CTE,
            instance_sql.FENCED_UPDATE_CTE.format(sets=instance_sql.commit_sets(commit)),
            *instance_sql.commit_ctes(commit, params, stamps=stamps),
        ]
        if self.conn.execute(instance_sql.statement(parts), params).fetchone() is None:
            raise Fenced(f"instance {self.pk}: epoch {self.epoch} is stale")

    def _apply_locked(
        self,
        commit: commits.Commit,
        *,
        locked: tuple[int, dt.datetime | None],
        now: dt.datetime,
        sets: str = "",
        extra: dict | None = None,
    ) -> None:
        """Inside a transaction that holds the row lock (``locked`` = the next event id and the
        newest event's time, from :meth:`_lock_and_find`): the same writes as :meth:`apply`, as
        separate statements (they all go out in the pipeline)."""
        first_id, last = locked
        stamps = history.stamps(commit.events, now=now, after=last)
        self.conn.execute(
            instance_sql.UPDATE_LOCKED.format(sets=instance_sql.commit_sets(commit) + sets),
            {
                "pk": self.pk,
                "n": len(commit.events),
                "new": commit.new_steps,
                "status": commit.status,
                "now": now,
                "newest": stamps[-1] if stamps else None,
                **(extra or {}),
            },
        )
        if commit.step is not None:
            self.conn.execute(
                instance_sql.UPSERT_STEP,
                {"pk": self.pk, "now": now, **instance_sql.step_params(commit.step)},
            )
        if commit.timer is not None:
            self.conn.execute(
                instance_sql.UPSERT_TIMER,
                {"pk": self.pk, "now": now, "timer_kind": commit.timer[0], "timer_due": commit.timer[1]},
            )
        if commit.cancel_timer is not None:
            self.conn.execute(instance_sql.DELETE_TIMER, {"pk": self.pk, "cancel_kind": commit.cancel_timer})
        with self.conn.cursor() as cur:
            cur.executemany(
                instance_sql.INSERT_HISTORY,
                [
                    {
                        "pk": self.pk,
                        "event_id": first_id + i,
                        "event_type": e.event_type,
                        "attributes": _json(e.attributes),
                        "stamp": stamp,
                    }
                    for i, (e, stamp) in enumerate(zip(commit.events, stamps, strict=True))
                ],
            )

    # -- wait --------------------------------------------------------------------------------------------
    def try_wait(self, *, name: str, wait: decide.TryWait, now: dt.datetime) -> tuple[str, dict | None]:
        """Consume the oldest matching event (accepted at or before the timeout) with the step result,
        or record ``wait_timeout`` when ``now >= timeout_at``; one transaction, two round trips
        (psycopg pipeline): the fenced row lock with the inbox lookup, then the writes and COMMIT.

        Returns ``("consumed", payload)``, ``("timed_out", None)`` or ``("suspend", None)`` (nothing
        recorded: the caller kills the child, then calls :meth:`commit_wait_suspend`). Raises
        :class:`Fenced`.
        """
        with self.conn.pipeline() as pipeline, self.conn.transaction():
            locked, row = self._lock_and_find(
                pipeline, wait=wait, now=now, columns="pk, sequence, payload, canonical_bytes"
            )
            if row is not None:
                inbox_pk, sequence, payload, size = row
                self.conn.execute(instance_sql.DELETE_EVENT, {"inbox_pk": inbox_pk})
                commit = commits.wait_consumed(name=name, wait=wait, sequence=sequence, payload=payload)
                self._apply_locked(
                    commit,
                    locked=locked,
                    now=now,
                    extra={"size": size},
                    sets=instance_sql.SET_EVENT_CONSUMED,
                )
                return "consumed", payload
            if now < wait.timeout_at:
                return "suspend", None
            self._apply_locked(commits.wait_timed_out(name=name, wait=wait), locked=locked, now=now)
            return "timed_out", None

    def commit_wait_suspend(self, *, name: str, wait: decide.TryWait, now: dt.datetime) -> bool:
        """After the child is dead: publish ``waiting`` with the timeout timer — unless a matching
        event arrived meanwhile (then stay ``running``; returns True: dispatch a context). Same two
        round trips as :meth:`try_wait`; the inbox is read after the row lock was granted, so an
        event whose ``send_event`` saw ``running`` is never missed (no lost wake-up)."""
        with self.conn.pipeline() as pipeline, self.conn.transaction():
            locked, row = self._lock_and_find(pipeline, wait=wait, now=now, columns="1")
            commit = commits.wait_suspend(
                name=name, wait=wait, arrived=row is not None, lifetime_ends_at=self.lifetime_ends_at
            )
            self._apply_locked(commit, locked=locked, now=now)
        return row is not None

    def _lock_and_find(
        self, pipeline: psycopg.Pipeline, *, wait: decide.TryWait, now: dt.datetime, columns: str
    ) -> tuple[tuple[int, dt.datetime | None], tuple | None]:
        """In a pipelined transaction: the fenced row lock (returns the next event id and the newest
        event's time) and the oldest matching inbox row (a separate statement: its snapshot follows
        the lock). Raises Fenced."""
        lock = self.conn.execute(instance_sql.LOCK_FENCED, self._params(now))
        found = self.conn.execute(
            instance_sql.FIND_EVENT.format(columns=columns),
            {"pk": self.pk, "type": wait.event_type.encode("utf-8"), "timeout_at": wait.timeout_at},
        )
        pipeline.sync()
        locked = lock.fetchone()
        if locked is None:
            raise Fenced(f"instance {self.pk}: epoch {self.epoch} is stale")
        return (locked[0], locked[1]), found.fetchone()

    # -- the end ---------------------------------------------------------------------------------------
    def commit_terminal(
        self,
        *,
        status: str,
        now: dt.datetime,
        output: dict | None = None,
        error: dict | None = None,
        details: dict | None = None,
    ) -> None:
        """Publish ``complete`` (with ``output``) or ``errored`` (with ``error``), purge the inbox and
        the timers, append the history: one statement. Raises :class:`Fenced`.

        The inbox purge must not miss an event that a concurrent ``send_event`` committed while
        this statement waited for the row lock (its DELETE reads the statement's snapshot). Such an
        event moved ``next_sequence`` on the locked row version, so comparing the snapshot's
        ``next_sequence`` with the updated row's tells; then one more DELETE (a fresh snapshot)
        purges it. No event can be accepted afterwards: the instance is terminal.
        """
        assert status in ("complete", "errored")
        # ``details`` (type, traceback) go to the history event only, never into ``error``.
        event = history.completed() if status == "complete" else history.errored(error or {}, details=details)
        row = self.conn.execute(
            instance_sql.COMMIT_TERMINAL,
            self._params(
                now,
                status=status,
                output=_json(output),
                error=_json(error),
                event_type=event.event_type,
                attributes=_json(event.attributes),
            ),
        ).fetchone()
        if row is None:
            raise Fenced(f"instance {self.pk}: epoch {self.epoch} is stale")
        if row[0]:
            self.conn.execute(instance_sql.DELETE_INBOX, {"pk": self.pk})
