"""DurableWorkflow instances: the one code path of HTTP (CONTRACT §2.5) and bindings (§4.5).

Seed 000 "Caller Bindingとinstance": create (``instance_exists`` for a retained id, generated ids),
get (``unknown_instance``), status (seven statuses; ``output`` only when complete, ``error`` only
when errored), sendEvent (durable acceptance in per-instance order, queue limits, direct delivery
to a waiting matching wait), terminate (fence, cancel continuations, prove the stop, then publish),
plus the inbox and the history (CONTRACT §6) and the DELETE purge of a whole UID.

Every function opens its own session and commits before it dispatches (STYLE §5). Domain
failures are ``models.errors.DomainError`` with CONTRACT §2.4 codes; ``TypeError``-class argument
problems are ``invalid_request`` (CONTRACT §8). Times are aware UTC datetimes; durations are in
seconds. Redis is touched only to stop contexts: lease keys prove a stop (``lease_key``) and
``stop_signals`` asks the owners to stop now; this module must not import ``workers.engine`` (the
API imports it). On the embedded default's SQLite every writing transaction takes the database
write lock first (:func:`write_lock_txn`), where Postgres uses row and advisory locks.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy import orm

from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from models.base import utcnow
from models.errors import DomainError
from takohost import config
from takohost.domain import documents, identifiers
from workers import dispatch
from workers.services import idempotency as idempotency_service
from workers.services import stop_signals

log = logging.getLogger(__name__)

#: Seed 000: "instance寿命は作成から31536000秒".
LIFETIME_SECONDS = 31_536_000
#: Seed 000: "terminal履歴とIDはterminal遷移から少なくとも2592000秒保持する".
RETENTION_SECONDS = 2_592_000
#: Seed 000 sendEvent: at most 1024 unconsumed events and 1048576 canonical bytes of {type,payload?}.
MAX_QUEUED_EVENTS = 1024
MAX_QUEUED_BYTES = 1_048_576
#: CONTRACT §8: terminate() that cannot prove the stop in 30 s → backend_unavailable.
TERMINATE_WAIT_SECONDS = 30.0
#: Page sizes of the list and history calls.
DEFAULT_PAGE = 100
MAX_PAGE = 1000
#: Largest ``after`` a page token may carry: instance pks are BIGINT, event ids INTEGER.
MAX_INSTANCE_PK = 2**63 - 1
MAX_EVENT_ID = 2**31 - 1

NON_TERMINAL = ("queued", "running", "sleeping", "waiting")

#: CONTRACT §6 event types.
EVENT_TYPES = (
    "InstanceCreated",
    "ContextStarted",
    "StepAttemptStarted",
    "StepAttemptFailed",
    "StepCompleted",
    "StepFailed",
    "SleepScheduled",
    "SleepCompleted",
    "WaitStarted",
    "EventAccepted",
    "EventConsumed",
    "WaitTimedOut",
    "ContextSuspended",
    "InstanceCompleted",
    "InstanceErrored",
    "InstanceTerminated",
)


class _Absent:
    """Marks an optional document that was not given at all (seed: only ``undefined`` is "none")."""

    def __repr__(self) -> str:
        return "ABSENT"


#: An omitted ``params``/``payload`` (an explicit ``None`` over HTTP is ``invalid_params``).
ABSENT: Any = _Absent()


# --------------------------------------------------------------------------------------------
# small helpers


def lifetime_seconds(settings: config.Settings | None = None) -> float:
    """An instance's lifetime in seconds: 31536000, or ``TAKOHOST_TEST_LIFETIME_SECONDS`` in tests."""
    settings = settings or config.load_settings()
    return settings.test_lifetime_seconds or LIFETIME_SECONDS


def retention_seconds(settings: config.Settings | None = None) -> float:
    """How long a terminal instance is kept: 2592000 s, or ``TAKOHOST_TEST_RETENTION_SECONDS``."""
    settings = settings or config.load_settings()
    return settings.test_retention_seconds or RETENTION_SECONDS


def write_lock_txn(session: orm.Session) -> None:
    """On the embedded default's SQLite, take the database write lock as the transaction's first
    statement (a no-op ``UPDATE``), so what the transaction reads afterwards stays current until it
    commits — the portable stand-in for Postgres row locks and advisory locks. No-op on Postgres."""
    if not _postgres(session):
        session.execute(sa.text("UPDATE workflow_closures SET closed_at = closed_at WHERE 0 = 1"))


def rfc3339(value: dt.datetime) -> str:
    """``value`` as RFC 3339 UTC with milliseconds: ``2026-11-30T09:46:00.202Z``."""
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def lease_key(namespace: str, instance_pk: int) -> str:
    """The Redis key of an instance's replay-context lease: ``{namespace}:lease:{pk}``."""
    return f"{namespace}:lease:{instance_pk}"


_redis_clients: dict[tuple[int, str], redis.Redis] = {}


def _redis(settings: config.Settings) -> redis.Redis:
    key = (os.getpid(), settings.redis_url)
    client = _redis_clients.get(key)
    if client is None:
        client = _redis_clients[key] = redis.Redis.from_url(
            settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )
    return client


def live_leases(instance_pks: Sequence[int], *, settings: config.Settings | None = None) -> set[int]:
    """The subset of ``instance_pks`` that hold a live lease in Redis (one pipelined round trip).

    Raises ``DomainError("backend_unavailable")`` when Redis cannot be reached: without it no stop
    can be proven.
    """
    if not instance_pks:
        return set()
    settings = settings or config.load_settings()
    try:
        pipe = _redis(settings).pipeline(transaction=False)
        for pk in instance_pks:
            pipe.exists(lease_key(settings.namespace, pk))
        found = pipe.execute()
    except redis.RedisError as exc:
        raise DomainError("backend_unavailable", f"the lease store is unreachable: {exc}") from None
    return {pk for pk, live in zip(instance_pks, found, strict=True) if live}


def _id_or_error(value: object, *, what: str) -> str:
    try:
        return identifiers.validate_scalar_string(value, what=what)
    except TypeError as exc:
        raise DomainError("invalid_request", str(exc)) from None


def _document(value: object, *, what: str) -> bytes | None:
    """Canonical bytes of a params/payload value; ``ABSENT`` → ``None`` (no document)."""
    if value is ABSENT:
        return None
    try:
        return documents.canonical_document(value, allow_none=False)
    except documents.InvalidDocument as exc:
        raise DomainError(
            "invalid_params", f"{what} is not a document: {exc}", {"pointer": exc.pointer}
        ) from None
    except documents.DocumentTooLargeError as exc:
        raise DomainError("document_too_large", f"{what}: {exc}") from None


def _workflow_txn(session: orm.Session, *, space: str, workflow_uid: str) -> res_models.Resource:
    """The live DurableWorkflow ``workflow_uid`` of ``space`` (else ``404 not_found``)."""
    workflow = session.scalar(
        sa.select(res_models.Resource).where(
            res_models.Resource.uid == workflow_uid,
            res_models.Resource.space == space,
            res_models.Resource.form == "DurableWorkflow",
            res_models.Resource.deleted_at.is_(None),
        )
    )
    if workflow is None:
        raise DomainError("not_found", "no such DurableWorkflow in this Space")
    return workflow


def _instance_txn(
    session: orm.Session, *, workflow_uid: str, instance_id: str, lock: bool = False
) -> inst_models.Instance:
    """The instance row (``FOR UPDATE`` when ``lock``), else ``404 unknown_instance``."""
    query = sa.select(inst_models.Instance).where(
        inst_models.Instance.workflow_uid == workflow_uid,
        inst_models.Instance.instance_id == instance_id,
    )
    if lock:
        query = query.with_for_update()
    instance = session.scalar(query)
    if instance is None:
        raise DomainError("unknown_instance", "no such instance (unknown, or no longer retained)")
    return instance


def append_history_txn(
    session: orm.Session,
    *,
    instance: inst_models.Instance,
    events: Iterable[tuple[str, dict]],
    now: dt.datetime,
) -> None:
    """Append ``(eventType, attributes)`` events to ``instance``'s history in the caller's
    transaction, numbering them from ``instance.next_event_id`` and stamping them
    ``max(now, instance.last_event_at)`` (the caller holds the row lock, so both are current)."""
    for event_type, attributes in events:
        assert event_type in EVENT_TYPES, event_type
        stamp = now if instance.last_event_at is None else max(now, instance.last_event_at)
        session.add(
            inst_models.HistoryEvent(
                instance_pk=instance.pk,
                event_id=instance.next_event_id,
                event_type=event_type,
                attributes=attributes,
                event_timestamp=stamp,
            )
        )
        instance.next_event_id += 1
        instance.last_event_at = stamp


def status_document(instance: inst_models.Instance) -> dict:
    """``{"status", "output"?, "error"?}`` (seed: output only when complete, error only when errored)."""
    body: dict[str, Any] = {"status": instance.status}
    if instance.status == "complete" and instance.output is not None:
        body["output"] = instance.output
    if instance.status == "errored" and instance.error is not None:
        body["error"] = instance.error
    return body


def _encode_token(value: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": value}).encode()).decode().rstrip("=")


def _decode_token(token: str | None, *, maximum: int) -> int | None:
    """The ``after`` of a page token; anything :func:`_encode_token` cannot have produced for a
    value in ``0..maximum`` (another encoding, other keys, a number out of range) is
    ``invalid_request``, never a database error."""
    if token is None:
        return None
    try:
        if not token.isascii():
            raise ValueError
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after = data["after"]
        if type(after) is not int or not 0 <= after <= maximum or _encode_token(after) != token:
            raise ValueError
        return after
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise DomainError("invalid_request", "pageToken is not a token this API issued") from None


def _limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_PAGE
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise DomainError("invalid_request", f"limit must be an integer 1..{MAX_PAGE}")
    return limit


# --------------------------------------------------------------------------------------------
# create / get / status / list

_LOCK_WORKFLOW = sa.text("""
SELECT pg_advisory_xact_lock_shared(hashtext(:uid)) FROM resources
WHERE uid = :uid AND space = :space AND form = 'DurableWorkflow' AND deleted_at IS NULL
""")
_INSERT_INSTANCE = sa.text("""
WITH closed AS (
  SELECT EXISTS (SELECT 1 FROM workflow_closures WHERE workflow_uid = :uid) AS closed
), ins AS (
  INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, params, step_count, next_event_id,
                         next_sequence, inbox_count, inbox_bytes, created_at, updated_at, lifetime_ends_at,
                         last_event_at)
  SELECT :uid, :space, :instance_id, 'queued', 0, CAST(:params AS json), 0, 2, 1, 0, 0, :now, :now, :lifetime,
         :now
  FROM closed WHERE NOT closed.closed
  ON CONFLICT (workflow_uid, instance_id) DO NOTHING
  RETURNING pk
), h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT ins.pk, 1, 'InstanceCreated', CAST(:attributes AS json), :now FROM ins
), t AS (
  INSERT INTO timers (instance_pk, kind, due_at, created_at) SELECT ins.pk, 'lifetime', :lifetime, :now FROM ins
)
SELECT (SELECT closed FROM closed), (SELECT pk FROM ins)
""")


def _postgres(session: orm.Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _insert_instance_pg_txn(session: orm.Session, **values: Any) -> tuple[bool, int | None]:
    """Postgres: ``(closed, pk)`` in two statements. A shared advisory lock pairs with the
    exclusive one ``purge_workflow`` closes the UID under, so a create either commits before the
    close (and is purged with it) or sees the closure: the closure is read by the next statement,
    whose snapshot is taken after the lock was granted. ``pk`` ``None``: the id exists."""
    live = session.execute(_LOCK_WORKFLOW, {"uid": values["workflow_uid"], "space": values["space"]}).first()
    if live is None:
        raise DomainError("not_found", "no such DurableWorkflow in this Space")
    closed, pk = session.execute(
        _INSERT_INSTANCE,
        {
            "uid": values["workflow_uid"],
            "space": values["space"],
            "instance_id": values["instance_id"].encode("utf-8"),
            "params": None if values["params"] is None else json.dumps(values["params"], allow_nan=False),
            "now": values["now"],
            "lifetime": values["lifetime"],
            "attributes": json.dumps({"instanceId": values["instance_id"]}),
        },
    ).one()
    return bool(closed), pk


def _insert_instance_txn(session: orm.Session, **values: Any) -> tuple[bool, int | None]:
    """Any other database (the embedded default's SQLite, one writer at a time): the same checks
    and rows as :func:`_insert_instance_pg_txn`, statement by statement, after the write lock (so
    a ``purge_workflow`` closing the UID commits either before the checks or after the insert)."""
    write_lock_txn(session)
    _workflow_txn(session, space=values["space"], workflow_uid=values["workflow_uid"])
    if session.get(inst_models.WorkflowClosure, values["workflow_uid"]) is not None:
        return True, None
    now = values["now"]
    pk = session.scalar(
        models_db.insert(session, inst_models.Instance.__table__)
        .values(
            workflow_uid=values["workflow_uid"],
            space=values["space"],
            instance_id=values["instance_id"],
            status="queued",
            epoch=0,
            params=values["params"],
            step_count=0,
            next_event_id=2,
            next_sequence=1,
            inbox_count=0,
            inbox_bytes=0,
            created_at=now,
            updated_at=now,
            lifetime_ends_at=values["lifetime"],
            last_event_at=now,
        )
        .on_conflict_do_nothing(index_elements=["workflow_uid", "instance_id"])
        .returning(inst_models.Instance.__table__.c.pk)
    )
    if pk is not None:
        session.execute(
            sa.insert(inst_models.HistoryEvent.__table__).values(
                instance_pk=pk,
                event_id=1,
                event_type="InstanceCreated",
                attributes={"instanceId": values["instance_id"]},
                event_timestamp=now,
            )
        )
        session.execute(
            sa.insert(inst_models.Timer.__table__).values(
                instance_pk=pk, kind="lifetime", due_at=values["lifetime"], created_at=now
            )
        )
    return False, pk


def create(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str | None = None,
    params: Any = ABSENT,
    now: dt.datetime | None = None,
) -> str:
    """Create an instance of DurableWorkflow ``workflow_uid``; returns its id (seed: create).

    ``instance_id`` ``None`` → a host-generated unique id; ``params`` ``ABSENT`` → no params
    (``None`` given explicitly is ``invalid_params``). Commits the ``queued`` instance, its
    ``InstanceCreated`` event and its ``lifetime`` timer (due at creation + 31536000 s, seed 000),
    then dispatches the first replay context.

    Raises DomainError: ``invalid_request`` (bad id), ``invalid_params`` / ``document_too_large``
    (params), ``not_found`` (no live DurableWorkflow of ``space``, or one being deleted: it is
    going away), ``instance_exists`` (a retained id, terminal ones included).
    """
    now = now or utcnow()
    if instance_id is not None:
        instance_id = _id_or_error(instance_id, what="instance id")
    canonical = _document(params, what="params")
    stored_params = None if canonical is None else params
    generated = instance_id is None
    instance_id = instance_id or str(uuid.uuid4())
    values = {
        "workflow_uid": workflow_uid,
        "space": space,
        "instance_id": instance_id,
        "params": stored_params,
        "now": now,
        "lifetime": now + dt.timedelta(seconds=lifetime_seconds()),
    }
    with models_db.session_scope() as session:
        if _postgres(session):
            closed, pk = _insert_instance_pg_txn(session, **values)
        else:
            closed, pk = _insert_instance_txn(session, **values)
        if closed:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if pk is None:
            if generated:  # a uuid4 collision: practically impossible, never silently reused
                raise DomainError("backend_unavailable", "generated instance id collided; retry")
            raise DomainError("instance_exists", "an instance with this id exists (ids are retained)")
    dispatch.run_context(pk)
    return instance_id


def get(*, space: str, workflow_uid: str, instance_id: str) -> str:
    """Check that instance ``instance_id`` exists; returns its id (``unknown_instance`` if not)."""
    instance_id = _id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        _instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id)
    return instance_id


def status(*, space: str, workflow_uid: str, instance_id: str) -> dict:
    """``{"status", "output"?, "error"?: {"reason", "message"?}}`` of an instance."""
    instance_id = _id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        instance = _instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id)
        return status_document(instance)


def describe(*, space: str, workflow_uid: str, instance_id: str) -> dict:
    """The HTTP ``GET …/instances/{id}`` body: ``{"id", "status", "output"?, "error"?}``."""
    return {"id": instance_id, **status(space=space, workflow_uid=workflow_uid, instance_id=instance_id)}


def list_instances(
    *,
    space: str,
    workflow_uid: str,
    status_filter: str | None = None,
    page_token: str | None = None,
    limit: int | None = None,
) -> dict:
    """``{"instances": [{"id", "status", "createdAt"}], "nextPageToken"?}`` in creation order.

    Raises DomainError ``invalid_request`` for an unknown status, a bad token or limit.
    """
    if status_filter is not None and status_filter not in inst_models.STATUSES:
        raise DomainError("invalid_request", f"status must be one of {', '.join(inst_models.STATUSES)}")
    after = _decode_token(page_token, maximum=MAX_INSTANCE_PK)
    size = _limit(limit)
    with models_db.session_scope() as session:
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        query = (
            sa.select(
                inst_models.Instance.pk,
                inst_models.Instance.instance_id,
                inst_models.Instance.status,
                inst_models.Instance.created_at,
            )
            .where(inst_models.Instance.workflow_uid == workflow_uid)
            .order_by(inst_models.Instance.pk)
            .limit(size + 1)
        )
        if status_filter is not None:
            query = query.where(inst_models.Instance.status == status_filter)
        if after is not None:
            query = query.where(inst_models.Instance.pk > after)
        rows = session.execute(query).all()
    body: dict[str, Any] = {
        "instances": [
            {"id": row.instance_id, "status": row.status, "createdAt": rfc3339(row.created_at)}
            for row in rows[:size]
        ]
    }
    if len(rows) > size:
        body["nextPageToken"] = _encode_token(rows[size - 1].pk)
    return body


# --------------------------------------------------------------------------------------------
# events


def send_event(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str,
    event_type: str,
    payload: Any = ABSENT,
    idempotency: tuple[str, str] | None = None,
    now: dt.datetime | None = None,
) -> dict:
    """Durably accept an event for an instance in per-instance order (seed 000 sendEvent).

    ``payload`` ``ABSENT`` → no payload. ``idempotency`` = ``(key, request fingerprint)``: the same
    key and request replay the first answer without queueing twice. An event that a waiting
    matching wait can take (accepted at or before its timeout) bypasses the queue limits and wakes
    the instance (status ``running``, the timeout timer cancelled, a context dispatched after
    commit). Returns ``{}``.

    Raises DomainError: ``invalid_request`` (bad type), ``invalid_params`` / ``document_too_large``
    (payload), ``not_found`` (also while the DurableWorkflow is being deleted), ``unknown_instance``,
    ``instance_terminal``, ``event_queue_full``, ``idempotency_key_reused``.
    """
    now = now or utcnow()
    instance_id = _id_or_error(instance_id, what="instance id")
    event_type = _id_or_error(event_type, what="event type")
    _document(payload, what="payload")
    stored: dict[str, Any] = {"type": event_type}
    if payload is not ABSENT:
        stored["payload"] = payload
    try:
        size = len(documents.canonical_document(stored, allow_none=False) or b"")
    except documents.DocumentTooLargeError as exc:  # a 1 MiB payload plus its type: never queueable
        size = exc.size
    with models_db.session_scope() as session:
        write_lock_txn(session)
        if idempotency is not None:
            _workflow_txn(session, space=space, workflow_uid=workflow_uid)
            claim = idempotency_service.claim_txn(
                session,
                space=space,
                key=idempotency[0],
                request_hash=idempotency[1],
                operation_id=None,
                now=now,
            )
            if not claim.new:
                assert claim.record is not None
                return dict(claim.record.response_body or {})
            idempotency_service.store_response_txn(
                session, space=space, key=idempotency[0], status=202, body={}
            )
        row = (_lock_instance_pg_txn if _postgres(session) else _lock_instance_txn)(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id, now=now
        )
        if row is None:
            _workflow_txn(session, space=space, workflow_uid=workflow_uid)  # not_found first
            raise DomainError("unknown_instance", "no such instance (unknown, or no longer retained)")
        if row.closed:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if row.status in inst_models.TERMINAL_STATUSES:
            raise DomainError("instance_terminal", f"the instance is {row.status}; it takes no more events")
        direct = False
        if row.status == "waiting" and row.stopping is None:
            # A separate statement: its snapshot is taken after the row lock was granted, so it sees
            # the pending wait that the context committed together with ``waiting``.
            steps = inst_models.Step.__table__
            wait = session.execute(
                sa.select(steps.c.config, steps.c.timeout_at).where(
                    steps.c.instance_pk == row.pk, steps.c.kind == "wait", steps.c.state == "pending"
                )
            ).first()
            direct = (
                wait is not None
                and (wait.config or {}).get("type") == event_type
                and (wait.timeout_at is None or now <= wait.timeout_at)
            )
        if not direct and (
            row.inbox_count + 1 > MAX_QUEUED_EVENTS or row.inbox_bytes + size > MAX_QUEUED_BYTES
        ):
            raise DomainError(
                "event_queue_full",
                (
                    f"the instance holds {row.inbox_count} unconsumed events of {row.inbox_bytes} bytes;"
                    f" limits are {MAX_QUEUED_EVENTS} events and {MAX_QUEUED_BYTES} bytes"
                ),
            )
        accept = _accept_event_pg_txn if _postgres(session) else _accept_event_txn
        accept(session, row=row, event_type=event_type, payload=payload, size=size, now=now, direct=direct)
    if direct:
        dispatch.run_context(row.pk)
    return {}


_LOCK_INSTANCE = sa.text("""
SELECT i.pk, i.status, i.stopping, i.inbox_count, i.inbox_bytes, i.next_sequence, i.next_event_id,
       EXISTS (SELECT 1 FROM workflow_closures c WHERE c.workflow_uid = i.workflow_uid) AS closed
FROM instances i JOIN resources r ON r.uid = i.workflow_uid
WHERE i.workflow_uid = :uid AND i.instance_id = :instance_id
  AND r.space = :space AND r.form = 'DurableWorkflow' AND r.deleted_at IS NULL
FOR UPDATE OF i
""")


def _lock_instance_pg_txn(
    session: orm.Session, *, space: str, workflow_uid: str, instance_id: str, now: dt.datetime
) -> Any:
    """Postgres: the instance row locked ``FOR UPDATE``, with its closure flag (``None``: unknown
    instance, or a workflow that is not a live DurableWorkflow of ``space``)."""
    return session.execute(
        _LOCK_INSTANCE, {"uid": workflow_uid, "space": space, "instance_id": instance_id.encode("utf-8")}
    ).first()


def _lock_instance_txn(
    session: orm.Session, *, space: str, workflow_uid: str, instance_id: str, now: dt.datetime
) -> Any:
    """Any other database: an ``UPDATE`` comes first (on SQLite it takes the write lock), then the
    workflow and closure checks; the same row shape as :func:`_lock_instance_pg_txn`."""
    table = inst_models.Instance.__table__
    row = session.execute(
        sa.update(table)
        .where(table.c.workflow_uid == workflow_uid, table.c.instance_id == instance_id)
        .values(updated_at=now)
        .returning(
            table.c.pk,
            table.c.status,
            table.c.stopping,
            table.c.inbox_count,
            table.c.inbox_bytes,
            table.c.next_sequence,
            table.c.next_event_id,
            table.c.last_event_at,
        )
    ).first()
    if row is None:
        return None
    _workflow_txn(session, space=space, workflow_uid=workflow_uid)
    closed = session.get(inst_models.WorkflowClosure, workflow_uid) is not None
    return _LockedInstance(*row, closed=closed)


@dataclasses.dataclass(frozen=True)
class _LockedInstance:
    pk: int
    status: str
    stopping: str | None
    inbox_count: int
    inbox_bytes: int
    next_sequence: int
    next_event_id: int
    last_event_at: dt.datetime | None
    closed: bool


def _accept_event_pg_txn(
    session: orm.Session,
    *,
    row: Any,
    event_type: str,
    payload: Any,
    size: int,
    now: dt.datetime,
    direct: bool,
) -> None:
    """Postgres: the event, the counters, ``EventAccepted`` and a direct wake in one statement."""
    session.execute(
        _ACCEPT_EVENT,
        {
            "pk": row.pk,
            "type": event_type.encode("utf-8"),
            "type_json": json.dumps(event_type),  # ASCII JSON: a text parameter holds no NUL
            "payload": None if payload is ABSENT else json.dumps(payload, allow_nan=False),
            "size": size,
            "now": now,
            "direct": direct,
        },
    )


def _accept_event_txn(
    session: orm.Session,
    *,
    row: Any,
    event_type: str,
    payload: Any,
    size: int,
    now: dt.datetime,
    direct: bool,
) -> None:
    """Any other database: the same rows as :func:`_accept_event_pg_txn`, statement by statement
    (the row is locked, so the stored sequence and event id are the ones to use)."""
    instances = inst_models.Instance.__table__
    session.execute(
        sa.insert(inst_models.InboxEvent.__table__).values(
            instance_pk=row.pk,
            sequence=row.next_sequence,
            type=event_type,
            payload=None if payload is ABSENT else payload,
            canonical_bytes=size,
            accepted_at=now,
        )
    )
    stamp = now if row.last_event_at is None else max(now, row.last_event_at)
    values = {
        "next_sequence": row.next_sequence + 1,
        "inbox_count": instances.c.inbox_count + 1,
        "inbox_bytes": instances.c.inbox_bytes + size,
        "next_event_id": row.next_event_id + 1,
        "updated_at": now,
        "last_event_at": stamp,
    }
    if direct:
        values["status"] = "running"
    session.execute(sa.update(instances).where(instances.c.pk == row.pk).values(**values))
    session.execute(
        sa.insert(inst_models.HistoryEvent.__table__).values(
            instance_pk=row.pk,
            event_id=row.next_event_id,
            event_type="EventAccepted",
            attributes={"sequence": row.next_sequence, "type": event_type},
            event_timestamp=stamp,
        )
    )
    if direct:
        session.execute(sa.delete(inst_models.Timer.__table__).where(inst_models.Timer.instance_pk == row.pk))


_ACCEPT_EVENT = sa.text("""
WITH f AS (
  UPDATE instances SET next_sequence = next_sequence + 1, inbox_count = inbox_count + 1,
         inbox_bytes = inbox_bytes + :size, next_event_id = next_event_id + 1, updated_at = :now,
         status = CASE WHEN :direct THEN 'running' ELSE status END,
         last_event_at = GREATEST(last_event_at, :now)
  WHERE pk = :pk
  RETURNING next_sequence - 1 AS sequence, next_event_id - 1 AS event_id, last_event_at AS stamp
), e AS (
  INSERT INTO inbox_events (instance_pk, sequence, type, payload, canonical_bytes, accepted_at)
  SELECT :pk, f.sequence, :type, CAST(:payload AS json), :size, :now FROM f
), h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT :pk, f.event_id, 'EventAccepted',
         CAST('{"sequence":' || f.sequence || ',"type":' || :type_json || '}' AS json), f.stamp FROM f
), t AS (
  DELETE FROM timers WHERE instance_pk = :pk AND CAST(:direct AS boolean)
)
SELECT sequence FROM f
""")


def inbox(*, space: str, workflow_uid: str, instance_id: str) -> dict:
    """``{"events": [{"sequence", "type", "payload"?, "acceptedAt"}]}``: accepted, unconsumed events
    in acceptance order (the inspectable inbox, CONTRACT §2.5)."""
    instance_id = _id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        instance = _instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id)
        rows = session.scalars(
            sa.select(inst_models.InboxEvent)
            .where(inst_models.InboxEvent.instance_pk == instance.pk)
            .order_by(inst_models.InboxEvent.sequence)
        ).all()
    events = []
    for row in rows:
        event: dict[str, Any] = {"sequence": row.sequence, "type": row.type}
        if row.payload is not None:
            event["payload"] = row.payload
        event["acceptedAt"] = rfc3339(row.accepted_at)
        events.append(event)
    return {"events": events}


# --------------------------------------------------------------------------------------------
# history


def history(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str,
    page_token: str | None = None,
    limit: int | None = None,
) -> dict:
    """``{"events": [{"eventId", "eventTimestamp", "eventType", "attributes"}], "nextPageToken"?}``,
    oldest first (CONTRACT §6). ``StepCompleted`` of a ``do``/``wait`` step carries the recorded
    ``result`` read from the step row (the data replay reads, not a copy)."""
    instance_id = _id_or_error(instance_id, what="instance id")
    after = _decode_token(page_token, maximum=MAX_EVENT_ID) or 0
    size = _limit(limit)
    with models_db.session_scope() as session:
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        instance = _instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id)
        rows = session.scalars(
            sa.select(inst_models.HistoryEvent)
            .where(
                inst_models.HistoryEvent.instance_pk == instance.pk, inst_models.HistoryEvent.event_id > after
            )
            .order_by(inst_models.HistoryEvent.event_id)
            .limit(size + 1)
        ).all()
        names = {row.attributes.get("name") for row in rows[:size] if row.event_type == "StepCompleted"}
        results = {}
        if names:
            results = dict(
                session.execute(
                    sa.select(inst_models.Step.name, inst_models.Step.result).where(
                        inst_models.Step.instance_pk == instance.pk, inst_models.Step.name.in_(names)
                    )
                ).all()
            )
    events = []
    for row in rows[:size]:
        attributes = dict(row.attributes)
        if row.event_type == "StepCompleted" and results.get(attributes.get("name")) is not None:
            attributes["result"] = results[attributes["name"]]
        events.append(
            {
                "eventId": row.event_id,
                "eventTimestamp": rfc3339(row.event_timestamp),
                "eventType": row.event_type,
                "attributes": attributes,
            }
        )
    body: dict[str, Any] = {"events": events}
    if len(rows) > size:
        body["nextPageToken"] = _encode_token(rows[size - 1].event_id)
    return body


# --------------------------------------------------------------------------------------------
# terminate


def terminate(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str,
    now: dt.datetime | None = None,
    wait_seconds: float = TERMINATE_WAIT_SECONDS,
) -> dict:
    """Terminate an instance (seed 000 terminate(); CONTRACT §8); returns ``{"status"}``.

    1. one transaction: bump the epoch (fences the owner), mark ``stopping = 'terminate'``, cancel
       every timer (queued wakes are refused by the fence: a context starts only while ``stopping``
       is unset); 2. ask the owning worker to kill the child now (``stop_signals.publish``; its
       heartbeat also notices the epoch by itself) and wait until no lease is live: the owner killed
       and reaped its child, then dropped the lease — or the lease expired, which proves the child's
       watchdog fired (it is shorter than the lease TTL); 3. one transaction: ``terminated``, inbox
       purged, ``InstanceTerminated``. Already terminal → success with that status. A stop not proven
       within ``wait_seconds`` → ``backend_unavailable``; calling again continues the same
       termination (no second fence: the first one still holds, and the beat sweep publishes
       ``terminated`` by itself once the stop is proven).

    Raises DomainError: ``invalid_request``, ``not_found`` (also while the DurableWorkflow is being
    deleted: the delete stops the instance itself), ``unknown_instance``, ``backend_unavailable``.
    """
    instance_id = _id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        write_lock_txn(session)
        _workflow_txn(session, space=space, workflow_uid=workflow_uid)
        instance = _instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id, lock=True)
        if session.get(inst_models.WorkflowClosure, workflow_uid) is not None:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if instance.status in inst_models.TERMINAL_STATUSES:
            return {"status": instance.status}
        pk = instance.pk
        if instance.stopping is None:
            table = inst_models.Instance.__table__
            session.execute(
                sa.update(table)
                .where(table.c.pk == pk)
                .values(epoch=table.c.epoch + 1, stopping="terminate", updated_at=now or utcnow())
            )
            session.execute(sa.delete(inst_models.Timer).where(inst_models.Timer.instance_pk == pk))
    stop_signals.publish([pk])
    deadline = time.monotonic() + wait_seconds
    while live_leases([pk]):
        if time.monotonic() >= deadline:
            raise DomainError(
                "backend_unavailable",
                "could not prove within the time limit that the instance's code stopped; call again",
            )
        time.sleep(0.02)
    return {"status": finish_termination(pk, now=now)}


def finish_termination(instance_pk: int, *, now: dt.datetime | None = None) -> str:
    """Publish ``terminated`` for an instance whose stop is proven (``stopping = 'terminate'``);
    returns the final status (an instance already terminal keeps its status)."""
    now = now or utcnow()
    with models_db.session_scope() as session:
        write_lock_txn(session)
        instance = session.scalar(
            sa.select(inst_models.Instance).where(inst_models.Instance.pk == instance_pk).with_for_update()
        )
        if instance is None:
            raise DomainError("unknown_instance", "no such instance")
        if instance.status in inst_models.TERMINAL_STATUSES:
            return instance.status
        instance.status = "terminated"
        instance.stopping = None
        instance.output = None
        instance.error = None
        instance.terminal_at = now
        instance.updated_at = now
        instance.inbox_count = 0
        instance.inbox_bytes = 0
        purge_continuations_txn(session, instance_pk=instance_pk)
        append_history_txn(session, instance=instance, now=now, events=[("InstanceTerminated", {})])
    return "terminated"


def purge_continuations_txn(session: orm.Session, *, instance_pk: int) -> None:
    """Delete an instance's unconsumed events and timers (seed: "terminal遷移では未一致eventをpurge")."""
    session.execute(
        sa.delete(inst_models.InboxEvent).where(inst_models.InboxEvent.instance_pk == instance_pk)
    )
    session.execute(sa.delete(inst_models.Timer).where(inst_models.Timer.instance_pk == instance_pk))


# --------------------------------------------------------------------------------------------
# DurableWorkflow DELETE and observation


def purge_workflow(workflow_uid: str, *, now: dt.datetime) -> bool:
    """Stop and purge every instance of DurableWorkflow ``workflow_uid`` (seed 000 DELETE).

    Closes the UID for new create/event/wake, fences every owner (epoch bump, ``stopping =
    'delete'``), cancels every timer, and — once no instance of the UID holds a live lease (every
    child proven stopped) — deletes all instances with their steps, history and inbox. Returns
    ``False`` while a stop cannot be proven yet (call again later: each call continues); ``True``
    when nothing of the UID is left. Idempotent; touches nothing outside the UID.
    """
    with models_db.session_scope() as session:
        if _postgres(session):  # pairs with the shared lock of create (see _insert_instance_pg_txn)
            session.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(workflow_uid))))
        session.execute(
            models_db.insert(session, inst_models.WorkflowClosure.__table__)
            .values(workflow_uid=workflow_uid, closed_at=now)
            .on_conflict_do_nothing(index_elements=["workflow_uid"])
        )
    with models_db.session_scope() as session:
        # Fence once: an instance already marked by an earlier call keeps its epoch (a second bump
        # would only fence again what is fenced); the marked ones are still waited for below.
        fenced = session.scalars(
            sa.update(inst_models.Instance)
            .where(
                inst_models.Instance.workflow_uid == workflow_uid,
                inst_models.Instance.status.in_(NON_TERMINAL),
                sa.or_(inst_models.Instance.stopping.is_(None), inst_models.Instance.stopping != "delete"),
            )
            .values(epoch=inst_models.Instance.epoch + 1, stopping="delete", updated_at=now)
            .returning(inst_models.Instance.pk)
        ).all()
        pks = session.scalars(
            sa.select(inst_models.Instance.pk).where(
                inst_models.Instance.workflow_uid == workflow_uid,
                inst_models.Instance.status.in_(NON_TERMINAL),
            )
        ).all()
        session.execute(
            sa.delete(inst_models.Timer).where(
                inst_models.Timer.instance_pk.in_(
                    sa.select(inst_models.Instance.pk).where(
                        inst_models.Instance.workflow_uid == workflow_uid
                    )
                )
            )
        )
    stop_signals.publish(list(fenced))
    try:
        live = live_leases(list(pks))
    except DomainError:
        return False
    if live:
        log.info("purge waits for running contexts", extra={"workflow": workflow_uid, "live": len(live)})
        return False
    while True:
        with models_db.session_scope() as session:
            write_lock_txn(session)
            batch = session.scalars(
                sa.select(inst_models.Instance.pk)
                .where(inst_models.Instance.workflow_uid == workflow_uid)
                .limit(500)
            ).all()
            if not batch:
                return True
            for model in (
                inst_models.HistoryEvent,
                inst_models.Step,
                inst_models.InboxEvent,
                inst_models.Timer,
            ):
                session.execute(sa.delete(model).where(model.instance_pk.in_(batch)))
            session.execute(sa.delete(inst_models.Instance).where(inst_models.Instance.pk.in_(batch)))


def observe_workflow_txn(session: orm.Session, *, workflow: res_models.Resource, ready: bool) -> dict:
    """A DurableWorkflow's ``observed``: ``{"ready": ready, "instanceCounts": {status: n}}`` with all
    seven statuses (seed 000 "確認済みならready:booleanと…instanceCounts"). Runs in the caller's
    transaction; ``ready`` is decided by the caller (every weighted Version exports the class)."""
    counts = dict.fromkeys(inst_models.STATUSES, 0)
    rows = session.execute(
        sa.select(inst_models.Instance.status, sa.func.count())
        .where(inst_models.Instance.workflow_uid == workflow.uid)
        .group_by(inst_models.Instance.status)
    ).all()
    for status_name, count in rows:
        if status_name in counts:
            counts[status_name] = count
    return {"ready": bool(ready), "instanceCounts": counts}


# --------------------------------------------------------------------------------------------
# bindings (env.NAME calls from workflow code, relayed by the replay context)

_BINDING_ARGS = {
    "create": ({"id", "params"}, set()),
    "get": ({"id"}, {"id"}),
    "status": ({"id"}, {"id"}),
    "send_event": ({"id", "type", "payload"}, {"id", "type"}),
    "terminate": ({"id"}, {"id"}),
}


def call_binding(
    *, space: str, workflow_uid: str, call: str, args: dict, now: dt.datetime | None = None
) -> Any:
    """Run one binding call from workflow code (CONTRACT §4.5), the same code path as HTTP.

    ``args`` as the sandbox sends them (``id``, ``params``, ``type``, ``payload``; absent keys are
    "not given"). Returns the ``binding_result`` value: ``{"id"}`` for create/get, the status
    document for status, ``None`` otherwise. Raises DomainError (its ``code`` is the SDK error
    name the child raises; ``invalid_request`` becomes ``TypeError`` there).
    """
    allowed, required = _BINDING_ARGS.get(call, (None, None))
    if allowed is None or type(args) is not dict or not required <= set(args) <= allowed:
        raise DomainError("invalid_request", f"malformed binding call {call!r}")
    if call == "create":
        new_id = create(
            space=space,
            workflow_uid=workflow_uid,
            instance_id=args.get("id"),
            params=args.get("params", ABSENT),
            now=now,
        )
        return {"id": new_id}
    if call == "get":
        return {"id": get(space=space, workflow_uid=workflow_uid, instance_id=args["id"])}
    if call == "status":
        return status(space=space, workflow_uid=workflow_uid, instance_id=args["id"])
    if call == "send_event":
        send_event(
            space=space,
            workflow_uid=workflow_uid,
            instance_id=args["id"],
            event_type=args["type"],
            payload=args.get("payload", ABSENT),
            now=now,
        )
        return None
    terminate(space=space, workflow_uid=workflow_uid, instance_id=args["id"], now=now)
    return None
