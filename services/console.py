"""Read-only views for the web console (``host_api.ui``): what the JSON API does not list.

The console reads the same rows as the API through the instance, cron and Operation services;
this module adds the few queries a person browsing a Space needs and the API has no call for:
instance counts by status of every DurableWorkflow (exact now, ``models.status_counts``, not the periodic ``observed``), an
instance list newest first filtered by status and id prefix, an instance's own columns (params,
timestamps) and step rows, and the Space's Operations newest first. Every query is scoped to the
Space passed in (the caller resolved it from the signed-in token), so nothing of another Space is
ever read. Lists are keyset-paged (an opaque token of the last row's sort key), so a page costs
the same with 10 or 10,000 instances.

Helpers suffixed ``_txn`` run in the caller's session and never commit (docs/spec/house-rules.md#hr-txn); they only read.
Domain failures are ``models.errors.DomainError`` with docs/spec/http-api.md#api-errors codes.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy import orm

from core import cron
from models import cron as cron_models
from models import instances as inst_models
from models import resources as res_models
from models import status_counts
from models import tenant_logs as tenant_log_models
from models.errors import DomainError
from services import cron_runs, forms, instance_common, instance_events, instance_history

#: Rows per page of the instance and Operation lists.
PAGE_SIZE = 50
#: Longest instance id prefix accepted by the filter (ids are at most 256 scalar values).
MAX_PREFIX = 256
#: History events an instance page reads at most.
HISTORY_CAP = 5000


class WorkflowRow(TypedDict):
    """One DurableWorkflow of the workflows page."""

    uid: str
    name: str
    className: str
    phase: str
    ready: bool
    counts: dict[str, int]
    total: int


class InstanceRow(TypedDict):
    """One line of an instance list: ``createdAt``/``updatedAt``/``terminalAt`` are aware UTC
    datetimes; ``step`` the step it is at (its pending step row: ``{"name", "kind", "attempts",
    "wakeAt"?, "timeoutAt"?, "error"?}``) or None; ``error`` an errored instance's."""

    id: str
    status: str
    createdAt: dt.datetime
    updatedAt: dt.datetime
    terminalAt: dt.datetime | None
    step: dict | None
    error: dict | None


def encode_token(values: list) -> str:
    """An opaque page token: unpadded URL-safe base64 of the JSON ``values``."""
    return base64.urlsafe_b64encode(json.dumps(values, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str, *, shape: tuple[type, ...]) -> list:
    """The values of a token made by :func:`encode_token` whose items have the types ``shape``.

    Raises DomainError ``invalid_request`` for anything else.
    """
    try:
        values = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(values, list) or len(values) != len(shape):
            raise ValueError
        if any(type(v) is not t for v, t in zip(values, shape, strict=True)):
            raise ValueError
        return values
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise DomainError("invalid_request", "the page token is not one this console issued") from None


def _micros(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _from_micros(us: int) -> dt.datetime:
    try:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    except OverflowError:
        raise DomainError("invalid_request", "the page token is not one this console issued") from None


def workflows_txn(session: orm.Session, *, space: str) -> list[WorkflowRow]:
    """Every live DurableWorkflow of ``space`` by name, with ``ready`` (decided now, as the
    observer decides it) and its instance counts for each of the seven statuses (read now)."""
    workflows = session.scalars(
        sa.select(res_models.Resource)
        .where(res_models.is_live("DurableWorkflow", space=space))
        .order_by(res_models.Resource.name)
    ).all()
    counts = status_counts.counts_txn(session, workflow_uids=[w.uid for w in workflows])
    return [
        WorkflowRow(
            uid=w.uid,
            name=w.name,
            className=w.spec.get("className", ""),
            phase=w.phase,
            ready=forms.workflow_ready_txn(session, workflow=w),
            counts=counts[w.uid],
            total=sum(counts[w.uid].values()),
        )
        for w in workflows
    ]


def workflow_txn(session: orm.Session, *, space: str, uid: str) -> res_models.Resource:
    """The live DurableWorkflow ``uid`` of ``space`` (``not_found`` otherwise)."""
    return instance_common.workflow_txn(session, space=space, workflow_uid=uid)


def workflow_by_ref_txn(session: orm.Session, *, space: str, ref: str) -> res_models.Resource:
    """The live DurableWorkflow of ``space`` whose UID, else whose name, is ``ref`` (console URLs
    name a workflow, ``/ui/workflows/order-fulfilment``; UIDs keep working). One indexed query.

    Raises DomainError ``not_found``.
    """
    rows = session.scalars(
        sa.select(res_models.Resource).where(
            res_models.is_live("DurableWorkflow", space=space),
            sa.or_(res_models.Resource.uid == ref, res_models.Resource.name == ref),
        )
    ).all()
    for row in sorted(rows, key=lambda r: r.uid != ref):  # a UID match first
        return row
    raise DomainError("not_found", f"no DurableWorkflow named {ref!r} in this Space")


def deployed_versions_txn(session: orm.Session, *, space: str, worker_uid: str | None) -> list[dict[str, Any]]:
    """The Versions the Worker's live WorkerDeployment gives weight, in its order: ``[{"uid",
    "name", "weight", "replayCheck"}]`` (``replayCheck``: the Version's ``observed.replayCheck``,
    ``services.replay_checks.summary``, or ``None`` when it was never checked; docs/testing.md
    "Checking a candidate against live instances"). ``[]`` when the Worker has no Deployment."""
    if worker_uid is None:
        return []
    deployment = session.scalars(
        sa.select(res_models.Resource)
        .where(res_models.is_live("WorkerDeployment", space=space, worker_uid=worker_uid))
        .order_by(res_models.Resource.created_at, res_models.Resource.uid)
    ).first()
    if deployment is None:
        return []
    entries = [e for e in (deployment.spec or {}).get("versions", []) if e.get("weight", 0) > 0]
    uids = [e["version"]["resourceUid"] for e in entries]
    versions = {
        row.uid: row
        for row in session.scalars(
            sa.select(res_models.Resource).where(
                res_models.is_live("WorkerVersion", space=space),
                res_models.Resource.uid.in_(uids),
            )
        )
    }
    out = []
    for entry in entries:
        version = versions.get(entry["version"]["resourceUid"])
        if version is None:
            continue
        out.append({
            "uid": version.uid,
            "name": version.name,
            "weight": entry["weight"],
            "replayCheck": (version.observed or {}).get("replayCheck"),
        })
    return out


class FoundInstance(TypedDict):
    """An instance found by id across the Space's workflows (the console's "go to instance")."""

    workflowName: str
    workflowUid: str
    id: str
    status: str
    createdAt: dt.datetime


def find_instance_txn(session: orm.Session, *, space: str, instance_id: str) -> list[FoundInstance]:
    """Every instance with id ``instance_id`` in any live DurableWorkflow of ``space``, by workflow
    name: one query on the ``(workflow_uid, instance_id)`` unique index.

    Raises DomainError ``invalid_request`` (not an instance id).
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    table = inst_models.Instance.__table__
    resource = res_models.Resource
    rows = session.execute(
        sa.select(resource.name, resource.uid, table.c.instance_id, table.c.status, table.c.created_at)
        .join(table, table.c.workflow_uid == resource.uid)
        .where(
            resource.space == space,
            resource.form == "DurableWorkflow",
            resource.deleted_at.is_(None),
            table.c.instance_id == instance_id,
        )
        .order_by(resource.name)
    ).all()
    return [
        FoundInstance(workflowName=r[0], workflowUid=r[1], id=r[2], status=r[3], createdAt=r[4]) for r in rows
    ]


def status_counts_txn(session: orm.Session, *, workflow_uid: str) -> dict[str, int]:
    """Instances of ``workflow_uid`` per status (all seven, zeros included; exact, maintained by
    ``models.status_counts``, not counted)."""
    return status_counts.counts_txn(session, workflow_uids=[workflow_uid])[workflow_uid]


def instance_page_txn(
    session: orm.Session,
    *,
    space: str,
    workflow_uid: str,
    status: str | list[str] | None = None,
    prefix: str | None = None,
    page_token: str | None = None,
    limit: int = PAGE_SIZE,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
) -> tuple[list[InstanceRow], str | None]:
    """One page of ``workflow_uid``'s instances, newest first (``createdAt``, then creation order),
    optionally only those of ``status`` (one or several), ids starting with ``prefix``, created
    in ``[created_after, created_before)``; returns ``(rows, next token)``. Each row carries the
    step it is at (one more query for the page's pending steps, never one per row).

    Keyset paging on the ``(workflow_uid, created_at, pk)`` index: a page reads ``limit + 1`` rows
    whatever the instance count. Raises DomainError ``not_found`` (no such workflow in ``space``),
    ``invalid_request`` (unknown status, bad prefix or token).
    """
    instance_common.workflow_txn(session, space=space, workflow_uid=workflow_uid)
    table = inst_models.Instance.__table__
    query = (
        sa.select(table.c.pk, table.c.instance_id, table.c.status, table.c.created_at, table.c.updated_at,
                  table.c.terminal_at, table.c.error)
        .where(table.c.workflow_uid == workflow_uid)
        .order_by(table.c.created_at.desc(), table.c.pk.desc())
        .limit(limit + 1)
    )
    statuses = [status] if isinstance(status, str) else list(status or [])
    if statuses:
        if any(s not in inst_models.STATUSES for s in statuses):
            raise DomainError("invalid_request", f"status must be one of {', '.join(inst_models.STATUSES)}")
        query = query.where(table.c.status.in_(statuses))
    if created_after is not None:
        query = query.where(table.c.created_at >= created_after)
    if created_before is not None:
        query = query.where(table.c.created_at < created_before)
    if prefix:
        prefix = instance_common.id_or_error(prefix[:MAX_PREFIX], what="id prefix")
        raw = prefix.encode("utf-8")
        # Ids are stored as UTF-8 bytes: a byte prefix is a character prefix, and the ids with it
        # are a range of the (workflow_uid, instance_id) index: raw <= id < raw with its last byte
        # + 1 (UTF-8 has no 0xFF byte, so that never overflows). A rare prefix reads its few rows,
        # not every instance of the workflow.
        after = raw[:-1] + bytes([raw[-1] + 1])
        query = query.where(
            table.c.instance_id >= sa.literal(raw, sa.LargeBinary),
            table.c.instance_id < sa.literal(after, sa.LargeBinary),
        )
    if page_token:
        us, pk = decode_token(page_token, shape=(int, int))
        query = query.where(sa.tuple_(table.c.created_at, table.c.pk) < sa.tuple_(_from_micros(us), pk))
    rows = session.execute(query).all()
    steps = _pending_steps_txn(session, instance_pks=[r.pk for r in rows[:limit]])
    page = [
        InstanceRow(
            id=r.instance_id, status=r.status, createdAt=r.created_at, updatedAt=r.updated_at,
            terminalAt=r.terminal_at, step=steps.get(r.pk), error=r.error if r.status == "errored" else None,
        )
        for r in rows[:limit]
    ]
    token = None
    if len(rows) > limit:
        last = rows[limit - 1]
        token = encode_token([_micros(last.created_at), last.pk])
    return page, token


def _pending_steps_txn(session: orm.Session, *, instance_pks: list[int]) -> dict[int, dict]:
    """The pending step of each instance (at most one at a time), by instance pk: one query."""
    if not instance_pks:
        return {}
    step = inst_models.Step
    found: dict[int, dict] = {}
    for s in session.scalars(sa.select(step).where(step.instance_pk.in_(instance_pks), step.state == "pending")):
        found[s.instance_pk] = {
            "name": s.name, "kind": s.kind, "attempts": s.attempts, "wakeAt": s.wake_at,
            "timeoutAt": s.timeout_at, "error": s.error,
        }
    return found


def instance_detail_txn(
    session: orm.Session, *, space: str, workflow_uid: str, instance_id: str, history_cap: int = HISTORY_CAP
) -> dict:
    """An instance as the console shows it: ``{"id", "status", "params"?, "output"?, "error"?,
    "createdAt", "updatedAt", "terminalAt"?, "lifetimeEndsAt", "versionUid"?, "inboxCount",
    "stepCount", "nextEventId", "steps": [...], "history": [...], "historyCut", "inbox": [...],
    "terminated"}`` (``terminated``: the ``InstanceTerminated`` attributes, ``{"reason"?, "by"?}``,
    of a terminated instance, else None)
    (times are aware datetimes; ``steps`` are the step rows by first use: ``{"name", "kind", "state", "attempts",
    "config"?, "wakeAt"?, "timeoutAt"?, "error"?, "createdAt", "updatedAt"}``; ``history`` the
    first ``history_cap`` history events as the API serves them, ``historyCut`` when more exist;
    ``inbox`` the unconsumed events, ``services.instance_events.QueuedEvent`` values as ``GET …/events``
    serves them).

    Raises DomainError ``not_found`` / ``unknown_instance`` / ``invalid_request``.
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    row = instance_common.workflow_instance_txn(
        session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
    )
    body: dict[str, Any] = {
        "pk": row.pk,
        "id": row.instance_id,
        "status": row.status,
        "stopping": row.stopping,
        "params": row.params,
        "output": row.output if row.status == "complete" else None,
        "error": row.error if row.status == "errored" else None,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
        "terminalAt": row.terminal_at,
        "lifetimeEndsAt": row.lifetime_ends_at,
        "versionUid": row.version_uid,
        "inboxCount": row.inbox_count,
        "stepCount": row.step_count,
        "nextEventId": row.next_event_id,
    }
    steps = session.scalars(
        sa.select(inst_models.Step).where(inst_models.Step.instance_pk == row.pk).order_by(inst_models.Step.pk)
    ).all()
    body["steps"] = [
        {
            "name": s.name,
            "kind": s.kind,
            "state": s.state,
            "attempts": s.attempts,
            "config": s.config,
            "wakeAt": s.wake_at,
            "timeoutAt": s.timeout_at,
            "error": s.error,
            "createdAt": s.created_at,
            "updatedAt": s.updated_at,
        }
        for s in steps
    ]
    body["history"], body["historyCut"] = instance_history.events_txn(
        session, instance_pk=row.pk, after=0, size=history_cap
    )
    body["terminated"] = None
    if row.status == "terminated":  # who ended it and why: its InstanceTerminated (the last event)
        event = inst_models.HistoryEvent
        body["terminated"] = session.scalar(
            sa.select(event.attributes)
            .where(event.instance_pk == row.pk, event.event_type == "InstanceTerminated")
            .order_by(event.event_id.desc())
            .limit(1)
        ) or {}
    body["inbox"] = instance_events.inbox_txn(session, instance_pk=row.pk)
    return body


def instance_version_txn(session: orm.Session, *, space: str, workflow_uid: str, instance_id: str) -> str:
    """A short string that changes whenever anything the instance page shows changes (a commit
    appends a history event, the inbox or the status moves): ``status:nextEventId:inboxCount``."""
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    row = instance_common.workflow_instance_txn(
        session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
    )
    return page_version(row.status, row.next_event_id, row.inbox_count, row.stopping,
                        latest_log_seq_txn(session, instance_pk=row.pk))


def page_version(status: str, next_event_id: int, inbox_count: int, stopping: str | None, log_seq: int) -> str:
    """The version string of :func:`instance_version_txn` from those columns and the latest log
    line's ``seq`` (a new line changes it: the logs panel follows live). Pure."""
    return f"{status}:{next_event_id}:{inbox_count}:{stopping or ''}:{log_seq}"


def latest_log_seq_txn(session: orm.Session, *, instance_pk: int) -> int:
    """The ``seq`` of the instance's newest log line (0 when none): one index probe."""
    log = tenant_log_models.TenantLog
    return session.scalar(
        sa.select(log.seq).where(log.instance_pk == instance_pk).order_by(log.seq.desc()).limit(1)
    ) or 0


def step_names_txn(session: orm.Session, *, instance_pk: int) -> list[str]:
    """The instance's step names by first use (the logs page's step filter)."""
    step = inst_models.Step
    return list(session.scalars(sa.select(step.name).where(step.instance_pk == instance_pk).order_by(step.pk)))


#: Log lines the instance page shows (the newest); its logs page shows this many a page.
LOG_TAIL = 300
LOG_PAGE = 500


def instance_log_tail_txn(
    session: orm.Session,
    *,
    instance_pk: int,
    limit: int = LOG_TAIL,
    step: str | None = None,
    attempt: int | None = None,
    stream: str | None = None,
    before: int | None = None,
) -> dict:
    """The newest ``limit`` log lines of an instance (before ``seq`` ``before`` when given),
    optionally only those of ``step``, ``attempt`` and ``stream``: ``{"lines": [...] (oldest
    first, as ``GET …/logs`` serves them, with ``seq``), "older": seq | None (the ``before`` of
    the page of older lines), "latestSeq"}``. One backward scan of the ``(instance_pk, seq)``
    index, whatever the instance's line count: the page of a 100,000-line instance costs what a
    300-line one does."""
    log = tenant_log_models.TenantLog
    query = sa.select(log).where(log.instance_pk == instance_pk)
    if step is not None:
        query = query.where(log.step == step)
    if attempt is not None:
        query = query.where(log.attempt == attempt)
    if stream is not None:
        query = query.where(log.stream == stream)
    if before is not None:
        query = query.where(log.seq < before)
    rows = session.scalars(query.order_by(log.seq.desc()).limit(limit + 1)).all()
    page = list(reversed(rows[:limit]))
    lines = [
        {
            "seq": r.seq, "time": cron_runs.rfc3339_ms(r.logged_at), "epoch": r.epoch, "step": r.step,
            "attempt": r.attempt, "stream": r.stream, "message": r.message, "replayed": r.replayed,
        }
        for r in page
    ]
    return {
        "lines": lines,
        "older": page[0].seq if len(rows) > limit and page else None,
        "latestSeq": latest_log_seq_txn(session, instance_pk=instance_pk),
    }


@dataclasses.dataclass(frozen=True)
class OperationRow:
    """One line of the console's Operations page: the Operation row and its resource's name and
    short Form name (``DurableWorkflow``, …)."""

    operation: res_models.Operation
    resource_name: str
    resource_form: str


def operations_page_txn(
    session: orm.Session, *, space: str, page_token: str | None = None, limit: int = PAGE_SIZE
) -> tuple[list[OperationRow], str | None]:
    """One page of ``space``'s Operations, newest first, each with its resource's name and Form;
    returns ``(rows, next token)``. The console shows each Operation as its JSON
    (``host_api.schemas.OperationView``, docs/spec/http-api.md#api-op)."""
    op = res_models.Operation
    query = (
        sa.select(op, res_models.Resource.name, res_models.Resource.form)
        .join(res_models.Resource, res_models.Resource.uid == op.resource_uid)
        .where(op.space == space)
        .order_by(op.created_at.desc(), op.id.desc())
        .limit(limit + 1)
    )
    if page_token:
        us, op_id = decode_token(page_token, shape=(int, str))
        query = query.where(sa.tuple_(op.created_at, op.id) < sa.tuple_(_from_micros(us), op_id))
    rows = session.execute(query).all()
    page = [OperationRow(operation=o, resource_name=name, resource_form=form) for o, name, form in rows[:limit]]
    token = None
    if len(rows) > limit:
        last = rows[limit - 1][0]
        token = encode_token([_micros(last.created_at), last.id])
    return page, token


def triggers_txn(session: orm.Session, *, space: str, now: dt.datetime) -> list[dict]:
    """Every live WorkerCronTrigger of ``space`` by name: ``{"uid", "name", "cron", "phase",
    "nextMatchAt"?}`` with ``nextMatchAt`` (aware datetime) the first match strictly after
    ``now``, absent when the expression can never fire."""
    rows = session.scalars(
        sa.select(res_models.Resource)
        .where(res_models.is_live("WorkerCronTrigger", space=space))
        .order_by(res_models.Resource.name)
    ).all()
    return [trigger_view(t, now=now) for t in rows]


def trigger_txn(session: orm.Session, *, space: str, uid: str, now: dt.datetime, upcoming: int = 1) -> dict:
    """One live WorkerCronTrigger of ``space`` as :func:`triggers_txn` lists it (``not_found``)."""
    row = session.scalar(
        sa.select(res_models.Resource).where(res_models.is_live("WorkerCronTrigger", space=space, uid=uid))
    )
    if row is None:
        raise DomainError("not_found", "no such WorkerCronTrigger in this Space")
    return trigger_view(row, now=now, upcoming=upcoming)


#: How a resource's ``phase`` reads on a page (the word ``phase`` is the API's, not a person's).
PHASE_TEXT = {
    "idle": "up to date",
    "reconciling": "applying a change",
    "failed": "its last change failed",
    "deleting": "being deleted",
}
#: Matches listed ahead on a trigger's page.
UPCOMING = 10
#: A run that starts (or has not started) this long after its scheduled time is shown as late.
LATE_SECONDS = 10.0


def trigger_view(row: res_models.Resource, *, now: dt.datetime, upcoming: int = 1) -> dict:
    """``{"uid", "name", "cron", "phase", "state", "nextMatchAt"?, "upcoming"}`` of a
    WorkerCronTrigger row (pure): ``state`` the phase in words (:data:`PHASE_TEXT`),
    ``upcoming`` the next ``upcoming`` matches strictly after ``now`` (aware datetimes)."""
    expression = row.spec.get("cron", "")
    body: dict[str, Any] = {
        "uid": row.uid, "name": row.name, "cron": expression, "phase": row.phase,
        "state": PHASE_TEXT.get(row.phase, row.phase),
    }
    body["upcoming"] = upcoming_matches(expression, now=now, count=upcoming)
    if body["upcoming"]:
        body["nextMatchAt"] = body["upcoming"][0]
    return body


def upcoming_matches(expression: str, *, now: dt.datetime, count: int) -> list[dt.datetime]:
    """The next ``count`` matches of ``expression`` strictly after ``now`` (fewer when it stops
    matching; none for an expression that does not parse). Pure."""
    try:
        schedule = cron.parse(expression)
    except cron.CronSyntaxError:
        return []
    found: list[dt.datetime] = []
    at = now
    while len(found) < count:
        following = cron.next_match(schedule, at)
        if following is None:
            break
        found.append(following)
        at = following
    return found


def last_runs_txn(session: orm.Session, *, trigger_uids: list[str]) -> dict[str, dict]:
    """The latest run of each trigger: ``{uid: {"scheduledTime", "outcome"}}`` (``outcome``: its
    last delivery's, ``pending`` before one, ``skipped`` for a skipped match). Two queries for
    all the triggers (the ``(trigger_uid, scheduled_time)`` unique indexes, newest first)."""
    if not trigger_uids:
        return {}
    match, delivery, skip = cron_models.CronMatch, cron_models.CronDelivery, cron_models.CronSkip
    last_delivery = (
        sa.select(delivery.outcome)
        .where(delivery.match_pk == match.pk)
        .order_by(delivery.pk.desc())
        .limit(1)
        .correlate(match)
        .scalar_subquery()
    )
    found: dict[str, dict] = {}
    for uid, at, outcome in session.execute(
        sa.select(match.trigger_uid, match.scheduled_time, last_delivery)
        .where(match.trigger_uid.in_(trigger_uids))
        .distinct(match.trigger_uid)
        .order_by(match.trigger_uid, match.scheduled_time.desc())
    ):
        found[uid] = {"scheduledTime": at, "outcome": outcome or "pending"}
    for uid, at in session.execute(
        sa.select(skip.trigger_uid, skip.scheduled_time)
        .where(skip.trigger_uid.in_(trigger_uids))
        .distinct(skip.trigger_uid)
        .order_by(skip.trigger_uid, skip.scheduled_time.desc())
    ):
        if uid not in found or found[uid]["scheduledTime"] < at:
            found[uid] = {"scheduledTime": at, "outcome": "skipped"}
    return found


def run_kind_txn(session: orm.Session, *, trigger_uid: str, scheduled_time: str) -> str | None:
    """``"recorded"`` or ``"skipped"`` for the trigger's run at ``scheduled_time`` (RFC 3339, as
    the ledger writes it), None when it has no run then (or the text is no instant)."""
    try:
        at = dt.datetime.fromisoformat(scheduled_time.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        return None
    for model, kind in ((cron_models.CronMatch, "recorded"), (cron_models.CronSkip, "skipped")):
        if session.scalar(
            sa.select(model.pk).where(model.trigger_uid == trigger_uid, model.scheduled_time == at)
        ) is not None:
            return kind
    return None


def run_instances_txn(session: orm.Session, *, space: str, trigger_uid: str, scheduled_time: str) -> list[dict]:
    """The instances the deliveries of the trigger's match at ``scheduled_time`` created, in
    order: ``[{"workflow": uid, "workflowName": name or None (deleted), "id"}]``; empty for a
    skipped match, an unknown one or a handler that created none. Only ``space``'s workflows."""
    try:
        at = dt.datetime.fromisoformat(scheduled_time.replace("Z", "+00:00"))
    except ValueError:
        return []
    started = cron_models.CronRunInstance
    delivery = cron_models.CronDelivery
    match = cron_models.CronMatch
    workflow = res_models.Resource
    rows = session.execute(
        sa.select(started.workflow_uid, workflow.name, workflow.deleted_at, started.instance_id)
        .join(delivery, delivery.pk == started.delivery_pk)
        .join(match, match.pk == delivery.match_pk)
        .join(workflow, workflow.uid == started.workflow_uid)
        .where(match.trigger_uid == trigger_uid, match.scheduled_time == at, workflow.space == space)
        .order_by(started.pk)
    )
    return [
        {"workflow": uid, "workflowName": None if deleted else name, "id": instance_id}
        for uid, name, deleted, instance_id in rows
    ]


def lateness_text(run: dict, *, now: dt.datetime) -> str | None:
    """Why a recorded run (a ledger entry: ``scheduledTime``, ``recordedAt``, ``deliveries``)
    started late, or is late starting, in words; None when on time (within :data:`LATE_SECONDS`).
    Pure. A match recorded late was late at the beat; one recorded on time but started late
    waited in the queue for a free worker slot (every slot was running contexts or handlers)."""
    def parse(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))

    scheduled = parse(run["scheduledTime"])
    recorded = parse(run["recordedAt"])
    deliveries = run.get("deliveries") or []
    started = parse(deliveries[0]["startedAt"]) if deliveries else None
    late = ((started or now) - scheduled).total_seconds()
    if late < LATE_SECONDS:
        return None
    amount = duration_words(late)
    if (recorded - scheduled).total_seconds() >= LATE_SECONDS:
        why = f"the beat recorded it {duration_words((recorded - scheduled).total_seconds())} late (no beat was running on time)"
    else:
        why = "no free worker slot: every slot was busy running contexts or handlers"
    return f"started {amount} late: {why}" if started else f"not started after {amount}: {why}"


def duration_words(seconds: float) -> str:
    """``42 s``, ``4 min 58 s``, ``2 h 5 min``. Pure."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
