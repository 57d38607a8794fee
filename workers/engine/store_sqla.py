"""The fenced commits of a replay context on any SQLAlchemy database — the embedded default's
SQLite (CONTRACT §1 "Embedded default", DESIGN "Dev mode": "SQLite via SQLAlchemy (conditional
UPDATE … WHERE epoch works there too)").

Same interface and the same commit plans (``commits``) as the Postgres store (``store``), which is
tuned to one round trip per step; here every commit is a short transaction whose FIRST statement
is the fenced ``UPDATE instances … WHERE pk = :pk AND epoch = :epoch``: on SQLite that statement
takes the database's write lock, so everything read after it in the transaction is current (the
inbox included) and no other writer interleaves. No step semantics live here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from workers.engine import commits, decide, history
from workers.engine.store import Fenced, InstanceSnapshot, PlannedCommits

INSTANCES = inst_models.Instance.__table__
STEPS = inst_models.Step.__table__
HISTORY = inst_models.HistoryEvent.__table__
INBOX = inst_models.InboxEvent.__table__
TIMERS = inst_models.Timer.__table__
CLOSURES = inst_models.WorkflowClosure.__table__
RESOURCES = res_models.Resource.__table__


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


class SqlaBackend:
    """Reads of a context and its :class:`SqlaContextStore`, on the engine of ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = models_db.get_engine(url)

    def load_instance(self, pk: int) -> InstanceSnapshot | None:
        """The instance, its DurableWorkflow's spec and its Worker's live Deployment."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(INSTANCES).where(INSTANCES.c.pk == pk)).first()
            if row is None:
                return None
            workflow = conn.execute(sa.select(RESOURCES).where(RESOURCES.c.uid == row.workflow_uid)).first()
            worker_uid = workflow.worker_uid or (workflow.spec.get("worker") or {}).get("resourceUid")
            deployment = conn.execute(
                sa.select(RESOURCES.c.spec).where(
                    RESOURCES.c.form == "WorkerDeployment",
                    RESOURCES.c.deleted_at.is_(None),
                    RESOURCES.c.worker_uid == worker_uid,
                )
            ).scalar()
            closed = conn.execute(
                sa.select(sa.func.count())
                .select_from(CLOSURES)
                .where(CLOSURES.c.workflow_uid == row.workflow_uid)
            ).scalar()
        return InstanceSnapshot(
            pk=pk,
            status=row.status,
            stopping=row.stopping,
            workflow_uid=row.workflow_uid,
            space=row.space,
            instance_id=row.instance_id,
            params=row.params,
            lifetime_ends_at=row.lifetime_ends_at,
            workflow_spec=workflow.spec,
            workflow_live=workflow.deleted_at is None,
            deployment_spec=deployment,
            closed=bool(closed),
        )

    def load_version(self, version_uid: str) -> dict | None:
        """A WorkerVersion's spec (``None`` if there is no such Version)."""
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(RESOURCES.c.spec).where(
                    RESOURCES.c.uid == version_uid, RESOURCES.c.form == "WorkerVersion"
                )
            ).scalar()

    def context_store(self, *, pk: int, lifetime_ends_at: dt.datetime) -> SqlaContextStore:
        """The fenced writes of one context of instance ``pk``."""
        return SqlaContextStore(self.engine, pk=pk, lifetime_ends_at=lifetime_ends_at)

    def read_epochs(self, pks: list[int]) -> dict[int, int]:
        """The stored epoch of each instance (the heartbeat's fence check)."""
        with self.engine.connect() as conn:
            return dict(
                conn.execute(
                    sa.select(INSTANCES.c.pk, INSTANCES.c.epoch).where(INSTANCES.c.pk.in_(pks))
                ).all()
            )

    def discard(self) -> None:
        """Nothing to drop: the engine's pool recovers by itself."""


class SqlaContextStore(PlannedCommits):
    """The fenced writes of one replay context (see ``store.ContextStore`` for each method's rule)."""

    def __init__(self, engine: sa.Engine, *, pk: int, lifetime_ends_at: dt.datetime) -> None:
        self.engine = engine
        self.pk = pk
        self.epoch: int | None = None
        self.lifetime_ends_at = lifetime_ends_at

    def _fenced(
        self, conn: sa.Connection, *, now: dt.datetime, commit: commits.Commit | None = None, **values: Any
    ) -> tuple[int, dt.datetime | None]:
        """The fenced ``UPDATE`` (first statement: the write lock); returns the first event id and
        the newest stored event's time (``last_event_at`` is set by :meth:`_history`)."""
        n = len(commit.events) if commit is not None else 0
        update = {"next_event_id": INSTANCES.c.next_event_id + n, **values}
        if commit is not None:
            update["step_count"] = INSTANCES.c.step_count + commit.new_steps
            if commit.status is not None:
                update["status"] = commit.status
            if commit.touch:
                update["updated_at"] = now
        row = conn.execute(
            sa.update(INSTANCES)
            .where(INSTANCES.c.pk == self.pk, INSTANCES.c.epoch == self.epoch)
            .values(**update)
            .returning(INSTANCES.c.next_event_id, INSTANCES.c.last_event_at)
        ).first()
        if row is None:
            raise Fenced(f"instance {self.pk}: epoch {self.epoch} is stale")
        return row[0] - n, row[1]

    def _write(
        self,
        conn: sa.Connection,
        commit: commits.Commit,
        *,
        locked: tuple[int, dt.datetime | None],
        now: dt.datetime,
    ) -> None:
        if commit.step is not None:
            row = commit.step
            values = {
                "instance_pk": self.pk,
                "name": row.name,
                "kind": row.kind,
                "state": row.state,
                "attempts": row.attempts,
                "result": row.result,
                "error": row.error,
                "config": row.config,
                "wake_at": row.wake_at,
                "timeout_at": row.timeout_at,
                "created_at": now,
                "updated_at": now,
            }
            stmt = _insert(conn, STEPS).values(**values)
            keep = {"instance_pk", "name", "kind", "config", "created_at"}
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["instance_pk", "name"],
                    set_={key: getattr(stmt.excluded, key) for key in values if key not in keep},
                )
            )
        if commit.timer is not None:
            stmt = _insert(conn, TIMERS).values(
                instance_pk=self.pk, kind=commit.timer[0], due_at=commit.timer[1], created_at=now
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["instance_pk", "kind"], set_={"due_at": stmt.excluded.due_at}
                )
            )
        self._history(conn, commit.events, locked=locked, now=now)

    def _history(
        self,
        conn: sa.Connection,
        events: list[history.Event],
        *,
        locked: tuple[int, dt.datetime | None],
        now: dt.datetime,
    ) -> None:
        """Insert ``events`` from event id ``locked[0]``, stamped never earlier than ``locked[1]``
        (the newest stored event's time), and move ``last_event_at`` (write lock held)."""
        if events:
            first_id, last = locked
            stamps = history.stamps(events, now=now, after=last)
            conn.execute(
                sa.insert(HISTORY),
                [
                    {
                        "instance_pk": self.pk,
                        "event_id": first_id + i,
                        "event_type": e.event_type,
                        "attributes": e.attributes,
                        "event_timestamp": stamp,
                    }
                    for i, (e, stamp) in enumerate(zip(events, stamps, strict=True))
                ],
            )
            conn.execute(
                sa.update(INSTANCES).where(INSTANCES.c.pk == self.pk).values(last_event_at=stamps[-1])
            )

    # -- start --------------------------------------------------------------------------------------
    def start(self, *, version_uid: str, now: dt.datetime) -> bool:
        """Take the fencing token (``store.ContextStore.start``)."""
        with self.engine.begin() as conn:
            retry = (
                sa.select(TIMERS.c.pk)
                .where(TIMERS.c.instance_pk == self.pk, TIMERS.c.kind == "retry")
                .exists()
            )
            closed = sa.select(CLOSURES.c.workflow_uid).where(
                CLOSURES.c.workflow_uid == INSTANCES.c.workflow_uid
            )
            row = conn.execute(
                sa.update(INSTANCES)
                .where(
                    INSTANCES.c.pk == self.pk,
                    INSTANCES.c.status.in_(("queued", "running")),
                    INSTANCES.c.stopping.is_(None),
                    ~retry,
                    ~closed.exists(),
                )
                .values(
                    epoch=INSTANCES.c.epoch + 1,
                    status="running",
                    version_uid=version_uid,
                    updated_at=now,
                    next_event_id=INSTANCES.c.next_event_id + 1,
                )
                .returning(INSTANCES.c.epoch, INSTANCES.c.next_event_id, INSTANCES.c.last_event_at)
            ).first()
            if row is None:
                return False
            self.epoch = row[0]
            self._history(
                conn, [history.context_started(version_uid, row[0])], locked=(row[1] - 1, row[2]), now=now
            )
        return True

    def is_fenced(self) -> bool:
        """True when the stored epoch is no longer this context's token (or the row is gone)."""
        with self.engine.connect() as conn:
            epoch = conn.execute(sa.select(INSTANCES.c.epoch).where(INSTANCES.c.pk == self.pk)).scalar()
        return epoch != self.epoch

    def load_steps(self) -> dict[str, decide.StepRecord]:
        """Every stored step of the instance by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(STEPS).where(STEPS.c.instance_pk == self.pk)).all()
        return {
            row.name: decide.StepRecord(
                name=row.name,
                kind=row.kind,
                state=row.state,
                attempts=row.attempts,
                result=row.result,
                error=row.error,
                config=row.config,
                wake_at=row.wake_at,
                timeout_at=row.timeout_at,
            )
            for row in rows
        }

    def apply(self, commit: commits.Commit, *, now: dt.datetime) -> None:
        """Apply a commit plan in one transaction. Raises :class:`Fenced`."""
        with self.engine.begin() as conn:
            self._write(conn, commit, locked=self._fenced(conn, now=now, commit=commit), now=now)

    def _oldest_event(self, conn: sa.Connection, wait: decide.TryWait) -> Any:
        return conn.execute(
            sa.select(INBOX.c.pk, INBOX.c.sequence, INBOX.c.payload, INBOX.c.canonical_bytes)
            .where(
                INBOX.c.instance_pk == self.pk,
                INBOX.c.type == wait.event_type,
                INBOX.c.accepted_at <= wait.timeout_at,
            )
            .order_by(INBOX.c.sequence)
            .limit(1)
        ).first()

    def try_wait(self, *, name: str, wait: decide.TryWait, now: dt.datetime) -> tuple[str, dict | None]:
        """See ``store.ContextStore.try_wait``."""
        with self.engine.begin() as conn:
            self._fenced(conn, now=now)  # the write lock first: the inbox read below is current
            row = self._oldest_event(conn, wait)
            if row is not None:
                commit = commits.wait_consumed(
                    name=name, wait=wait, sequence=row.sequence, payload=row.payload
                )
                conn.execute(sa.delete(INBOX).where(INBOX.c.pk == row.pk))
                locked = self._fenced(
                    conn,
                    now=now,
                    commit=commit,
                    inbox_count=INSTANCES.c.inbox_count - 1,
                    inbox_bytes=INSTANCES.c.inbox_bytes - row.canonical_bytes,
                )
                self._write(conn, commit, locked=locked, now=now)
                return "consumed", row.payload
            if now < wait.timeout_at:
                return "suspend", None
            commit = commits.wait_timed_out(name=name, wait=wait)
            self._write(conn, commit, locked=self._fenced(conn, now=now, commit=commit), now=now)
            return "timed_out", None

    def commit_wait_suspend(self, *, name: str, wait: decide.TryWait, now: dt.datetime) -> bool:
        """See ``store.ContextStore.commit_wait_suspend``."""
        with self.engine.begin() as conn:
            self._fenced(conn, now=now)
            arrived = self._oldest_event(conn, wait) is not None
            commit = commits.wait_suspend(
                name=name, wait=wait, arrived=arrived, lifetime_ends_at=self.lifetime_ends_at
            )
            self._write(conn, commit, locked=self._fenced(conn, now=now, commit=commit), now=now)
        return arrived

    def commit_terminal(
        self, *, status: str, now: dt.datetime, output: dict | None = None, error: dict | None = None
    ) -> None:
        """See ``store.ContextStore.commit_terminal`` (here the write lock comes first, so one
        DELETE sees every accepted event)."""
        assert status in ("complete", "errored")
        event = history.completed() if status == "complete" else history.errored(error or {})
        commit = commits.Commit(events=[event], status=status, touch=True)
        with self.engine.begin() as conn:
            locked = self._fenced(
                conn,
                now=now,
                commit=commit,
                output=output,
                error=error,
                terminal_at=now,
                inbox_count=0,
                inbox_bytes=0,
            )
            conn.execute(sa.delete(INBOX).where(INBOX.c.instance_pk == self.pk))
            conn.execute(sa.delete(TIMERS).where(TIMERS.c.instance_pk == self.pk))
            self._write(conn, commit, locked=locked, now=now)
