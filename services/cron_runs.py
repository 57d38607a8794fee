"""The cron runs ledger: deliveries of recorded matches and the runs listing (docs/spec/cron-trigger.md#cr-runs; docs/spec/cron-trigger.md).

A recorded match (``cron_matches``) is ``pending`` until one delivery finishes ``ok`` or
``failed``, then ``done``; a delivery whose worker vanished is finished as ``unknown`` and the
match is delivered again with the identical event (CB-03). Skipped matches (``cron_skips``)
are listed with their reason and never delivered. Helpers ending in ``_txn`` run in the
caller's transaction and never commit. The aggregate's statements (the claim's, a delivery's
start, finish and links, the sweep's) are ``models.cron_sql``'s; the runs ledger's page is read
here.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from core import cron
from models import cron as cron_models
from models import cron_sql
from models import resources as res_models
from models.errors import DomainError

#: Runs per page of ``GET …/runs``.
PAGE_SIZE = 50
#: ``error`` of a delivery finished as ``unknown`` because its worker vanished.
VANISHED = "the worker running this delivery vanished (no live lease); the match is delivered again"
#: ``error`` of a delivery finished as ``unknown`` because the host failed around the handler.
HOST_ERROR = "a host error interrupted this delivery; the match is delivered again"
#: ``error`` of a delivery finished as ``unknown`` because it lost its lease (another delivery
#: of the match may be running; the match is delivered again unless that one finishes it).
LEASE_LOST = "this delivery lost its lease; its handler was stopped and the match is delivered again"
#: ``error`` of a delivery whose handler was stopped because its trigger is being deleted.
STOPPED_BY_DELETE = (
    "the WorkerCronTrigger is being deleted: the handler was stopped (what it did so far is kept)"
)


def timed_out(limit_s: float) -> str:
    """``error`` of a delivery whose handler ran over the host's limit of ``limit_s`` seconds."""
    return f"the scheduled handler did not finish within {limit_s:g} s; it was stopped"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def epoch_ms(t: dt.datetime) -> int:
    """``t`` (aware) as integer UTC epoch milliseconds (the event's ``scheduledTime``)."""
    return (t - _EPOCH) // dt.timedelta(milliseconds=1)


def event_of(match: cron_models.CronMatch | sa.Row) -> dict:
    """The ``scheduled`` event of ``match``: the cron that matched and its instant (docs/spec/cron-trigger.md)."""
    return {"cron": match.cron, "scheduledTime": epoch_ms(match.scheduled_time)}


@dataclasses.dataclass(frozen=True)
class MatchToDeliver:
    """A pending match a delivery has claimed: its trigger, Space, Worker and ``scheduled`` event
    (``{"cron", "scheduledTime"}``, UTC epoch milliseconds; docs/spec/cron-trigger.md#cr-handler)."""

    pk: int
    trigger_uid: str
    space: str
    worker_uid: str
    event: dict


def claim_match_txn(session: orm.Session, *, match_pk: int, now: dt.datetime) -> MatchToDeliver | None:
    """Lock pending match ``match_pk`` for a delivery; None when it is gone or already ``done``.

    The caller holds the match's delivery lease, so every earlier unfinished delivery belongs to
    a vanished worker: it is finished ``unknown`` (:data:`VANISHED`) here. Locks the match row.
    """
    match = cron_sql.lock_pending_match_txn(session, match_pk=match_pk)
    if match is None:
        return None
    cron_sql.close_unfinished_deliveries_txn(session, match_pk=match_pk, now=now, error=VANISHED)
    return MatchToDeliver(
        pk=match_pk,
        trigger_uid=match.trigger_uid,
        space=match.space,
        worker_uid=match.worker_uid,
        event=event_of(match),
    )


def trigger_stopping_txn(session: orm.Session, *, trigger_uid: str, lock: bool = False) -> bool:
    """True while a DELETE of WorkerCronTrigger ``trigger_uid`` is accepted and not yet applied.

    That is the fence of running deliveries (docs/spec/cron-trigger.md#cr-runs, "Deleting a trigger"): a delivery
    running when the DELETE is accepted stops its handler; none starts until the DELETE is
    applied (matches recorded before it are still owed and delivered after it; docs/spec/cron-trigger.md).
    ``lock=True`` takes ``FOR SHARE`` on the trigger row, so a concurrent DELETE acceptance (which
    locks it ``FOR UPDATE``) is ordered with the caller's delivery row: either this sees the
    DELETE, or the DELETE's reconcile sees the delivery.
    """
    query = sa.select(res_models.Resource.phase, res_models.Resource.deleted_at).where(
        res_models.Resource.uid == trigger_uid
    )
    if lock:
        query = query.with_for_update(read=True)
    row = session.execute(query).one_or_none()
    return row is not None and row.phase == "deleting" and row.deleted_at is None


def deployment_spec_txn(session: orm.Session, *, worker_uid: str) -> dict | None:
    """The spec of ``worker_uid``'s live WorkerDeployment, or None when it has none."""
    return session.scalar(
        sa.select(res_models.Resource.spec).where(res_models.is_live("WorkerDeployment", worker_uid=worker_uid))
    )


def version_spec_txn(session: orm.Session, version_uid: str) -> dict | None:
    """The spec of live WorkerVersion ``version_uid``, or None (the loader of
    ``workers.sandbox.jobs.choose_version``)."""
    return session.scalar(
        sa.select(res_models.Resource.spec).where(res_models.is_live("WorkerVersion", uid=version_uid))
    )


# ---------------------------------------------------------------------------------------------
# Runs listing (GET /v2/spaces/{space}/resources/{uid}/runs)


def list_runs_txn(session: orm.Session, *, space: str, trigger_uid: str, page_token: str | None) -> dict:
    """One page of the trigger's runs ledger, newest ``scheduledTime`` first (docs/spec/cron-trigger.md#cr-runs).

    Returns ``{"runs": [...], "nextPageToken"?}``. A recorded match is ``{"cron",
    "scheduledTime", "recordedAt", "deliveries": [{"startedAt", "finishedAt"?, "outcome",
    "error"?, "instances"?}]}`` (a running delivery has no ``finishedAt`` and outcome
    ``"running"``; ``instances``: ``[{"workflow", "id"}]`` the handler created); a skipped
    one is ``{"cron", "scheduledTime", "outcome": "skipped", "reason"}``. Times are RFC 3339 UTC
    (``…Z``). Raises ``DomainError`` ``not_found`` unless ``trigger_uid`` is a live
    WorkerCronTrigger of ``space``, ``invalid_request`` for a malformed ``page_token``.
    """
    trigger = session.get(res_models.Resource, trigger_uid)
    if trigger is None or trigger.space != space or trigger.form != "WorkerCronTrigger" or trigger.deleted_at:
        raise DomainError("not_found", "no such WorkerCronTrigger in this Space")
    position = _decode_token(page_token) if page_token is not None else None
    matches = sa.select(
        cron_models.CronMatch.scheduled_time.label("t"),
        sa.literal("m").label("kind"),
        cron_models.CronMatch.pk.label("pk"),
    ).where(cron_models.CronMatch.trigger_uid == trigger_uid)
    skips = sa.select(
        cron_models.CronSkip.scheduled_time.label("t"),
        sa.literal("s").label("kind"),
        cron_models.CronSkip.pk.label("pk"),
    ).where(cron_models.CronSkip.trigger_uid == trigger_uid)
    ledger = sa.union_all(matches, skips).subquery()
    query = sa.select(ledger.c.t, ledger.c.kind, ledger.c.pk)
    if position is not None:
        t, kind = position
        query = query.where(sa.or_(ledger.c.t < t, sa.and_(ledger.c.t == t, ledger.c.kind < kind)))
    page = session.execute(query.order_by(ledger.c.t.desc(), ledger.c.kind.desc()).limit(PAGE_SIZE + 1)).all()
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    runs = _render(session, page)
    body: dict = {"runs": runs}
    if more:
        last_t, last_kind, _ = page[-1]
        body["nextPageToken"] = _encode_token(last_t, last_kind)
    return body


def _by_pk(session: orm.Session, model: Any, pks: list[int]) -> dict[int, Any]:
    """``{pk: row}`` of ``model`` for ``pks`` (no query when there are none)."""
    if not pks:
        return {}
    return {row.pk: row for row in session.scalars(sa.select(model).where(model.pk.in_(pks)))}


def _render(session: orm.Session, page: Sequence[Any]) -> list[dict]:
    match_pks = [pk for _, kind, pk in page if kind == "m"]
    skip_pks = [pk for _, kind, pk in page if kind == "s"]
    matches = _by_pk(session, cron_models.CronMatch, match_pks)
    skips = _by_pk(session, cron_models.CronSkip, skip_pks)
    deliveries: dict[int, list[dict]] = {}
    if match_pks:
        rows = list(
            session.scalars(
                sa.select(cron_models.CronDelivery)
                .where(cron_models.CronDelivery.match_pk.in_(match_pks))
                .order_by(cron_models.CronDelivery.started_at, cron_models.CronDelivery.pk)
            )
        )
        started = cron_sql.started_instances_txn(session, delivery_pks=[d.pk for d in rows])
        for d in rows:
            deliveries.setdefault(d.match_pk, []).append(_delivery(d, started.get(d.pk)))
    runs: list[dict] = []
    for _, kind, pk in page:
        if kind == "m":
            m = matches[pk]
            runs.append(
                {
                    "cron": m.cron,
                    "scheduledTime": cron.format_rfc3339(m.scheduled_time),
                    "recordedAt": rfc3339_ms(m.recorded_at),
                    "deliveries": deliveries.get(pk, []),
                }
            )
        else:
            s = skips[pk]
            runs.append(
                {
                    "cron": s.cron,
                    "scheduledTime": cron.format_rfc3339(s.scheduled_time),
                    "outcome": "skipped",
                    "reason": s.reason,
                }
            )
    return runs


def _delivery(d: cron_models.CronDelivery, instances: list[dict] | None = None) -> dict:
    item: dict = {"startedAt": rfc3339_ms(d.started_at)}
    if d.finished_at is not None:
        item["finishedAt"] = rfc3339_ms(d.finished_at)
    item["outcome"] = d.outcome or "running"
    if d.error:
        item["error"] = d.error
    if instances:
        item["instances"] = instances
    return item


def rfc3339_ms(t: dt.datetime) -> str:
    """``t`` (aware) as RFC 3339 UTC with milliseconds: ``2026-03-04T10:05:00.123Z``."""
    utc = t.astimezone(dt.UTC)
    return f"{cron.format_rfc3339(utc)[:-1]}.{utc.microsecond // 1000:03d}Z"


def _encode_token(t: dt.datetime, kind: str) -> str:
    raw = json.dumps({"t": epoch_ms(t), "k": kind}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> tuple[dt.datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
        ms, kind = value["t"], value["k"]
        if type(ms) is not int or kind not in ("m", "s"):
            raise ValueError("bad token fields")
        return _EPOCH + dt.timedelta(milliseconds=ms), kind
    except (binascii.Error, ValueError, KeyError, TypeError, OverflowError, UnicodeDecodeError):
        raise DomainError("invalid_request", "pageToken is not a token this API issued") from None
