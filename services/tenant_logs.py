"""Reading tenant logs (docs/spec/host-features.md#hf-observability): an instance's lines and a cron run's lines, paged.

``GET …/resources/{uid}/instances/{id}/logs`` and ``GET …/resources/{uid}/runs/{scheduledTime}/logs``
answer ``{"logs": [...], "nextPageToken", "removedLines"}``, oldest line first. An instance line is
``{"time", "epoch", "step", "attempt", "stream", "message", "replayed"}`` (``time`` RFC 3339 UTC with
milliseconds; ``epoch`` the context's fencing token; ``step``/``attempt`` the step attempt the host
was running when the line was written, ``null`` outside effects; ``stream`` ``stdout``/``stderr``
for the tenant's output and ``host`` for lines of the host: dropped-line markers, failures with
their traceback, replay diagnostics; ``replayed`` true for a tenant line printed while the context
replayed the steps its history recorded: the same code printed it in an earlier context). A run line is ``{"time", "delivery", "stream", "message"}``
(``delivery``: 1 for the match's first delivery, 2 for a redelivery …).

The functions return :class:`LogPage` values (``host_api.schemas.LogPage`` and ``RunLogPage`` write
them as those bodies). Unlike the history, the logs always answer ``nextPageToken``: a cursor after the last line
returned, so a follower (``takohost instances logs --follow``) polls with it; a page shorter than
the limit means there is nothing more yet. ``removedLines`` counts the oldest lines that gave way
to the per-instance (per-delivery) cap ``tenant_logs.MAX_STORED_LINES``.

Domain failures are ``DomainError`` (``unknown_instance``, ``not_found``, ``invalid_request``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from typing import Generic, TypeVar

import sqlalchemy as sa

from models import cron as cron_models
from models import db as models_db
from models import log_sql
from models import resources as res_models
from models.errors import DomainError
from services import instance_common, instance_pages
from services.instance_pages import FIRST_PAGE, PageRequest

#: Lines per page: default and largest ``limit`` (the instance list's and history's largest).
DEFAULT_PAGE = 500
MAX_PAGE = instance_pages.MAX_PAGE
_MAX_SEQ = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class InstanceLine:
    """One line of an instance (see the module doc): ``time`` aware UTC; ``epoch``, ``step`` and
    ``attempt`` ``None`` where the module doc says ``null``."""

    time: dt.datetime
    epoch: int | None
    step: str | None
    attempt: int | None
    stream: str
    message: str
    replayed: bool


@dataclasses.dataclass(frozen=True)
class RunLine:
    """One line of a cron run: ``delivery`` 1 for the match's first delivery, 2 for a redelivery …"""

    time: dt.datetime
    delivery: int
    stream: str
    message: str


#: A page's line type: ``InstanceLine`` or ``RunLine``.
LineT = TypeVar("LineT", InstanceLine, RunLine)


@dataclasses.dataclass(frozen=True)
class LogPage(Generic[LineT]):
    """One page of lines, oldest first: ``next_page_token`` the cursor after the last line (always
    given: poll with it to follow), ``removed_lines`` the oldest lines that gave way to the cap."""

    logs: list[LineT]
    next_page_token: str
    removed_lines: int


def _name(value: bytes | memoryview | None) -> str | None:
    return None if value is None else bytes(value).decode("utf-8")


def instance_logs(
    *, space: str, workflow_uid: str, instance_id: str, page: PageRequest = FIRST_PAGE
) -> LogPage[InstanceLine]:
    """The ``page`` of an instance's log lines (after its token; see module doc).

    Raises ``DomainError``: ``not_found`` (no such DurableWorkflow in ``space``),
    ``unknown_instance``, ``invalid_request`` (a token this API did not issue, a bad ``limit``).
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    after = instance_pages.decode_token(page.token, maximum=_MAX_SEQ) or 0
    size = instance_pages.page_size(page.limit, default=DEFAULT_PAGE)
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
        rows = log_sql.instance_page_txn(session, instance_pk=instance.pk, after=after, limit=size)
        first = rows[0].first if rows else log_sql.first_instance_seq_txn(session, instance_pk=instance.pk)
    logs = [
        InstanceLine(
            time=row.logged_at,
            epoch=row.epoch,
            step=_name(row.step),
            attempt=row.attempt,
            stream=row.stream,
            message=row.message,
            replayed=row.replayed,
        )
        for row in rows
    ]
    last = rows[-1].seq if rows else after
    return LogPage(
        logs=logs, next_page_token=instance_pages.encode_token(last), removed_lines=max(0, (first or 1) - 1)
    )


def parse_scheduled_time(text: str) -> dt.datetime:
    """A run's ``scheduledTime`` as the runs ledger writes it (RFC 3339 UTC, e.g.
    ``2026-03-04T10:05:00Z``) or as UTC epoch milliseconds (``1772618700000``).
    Raises ``DomainError`` ``invalid_request`` for anything else."""
    try:
        if text.isascii() and text.isdigit():
            return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=int(text))
        if not text.endswith("Z"):
            raise ValueError
        value = dt.datetime.fromisoformat(text[:-1] + "+00:00")
        if value.tzinfo is None:
            raise ValueError
        return value.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise DomainError(
            "invalid_request", "the run is named by its scheduledTime (RFC 3339 UTC, …Z) or epoch milliseconds"
        ) from None


def _encode_run_token(delivery: int, seq: int) -> str:
    raw = json.dumps({"d": delivery, "after": seq}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_run_token(token: str | None) -> tuple[int, int]:
    if token is None:
        return 0, 0
    try:
        if not token.isascii():
            raise ValueError
        value = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        delivery, seq = value["d"], value["after"]
        if type(delivery) is not int or type(seq) is not int or not 0 <= delivery < 2**31 or not 0 <= seq <= _MAX_SEQ:
            raise ValueError
        if _encode_run_token(delivery, seq) != token:
            raise ValueError
        return delivery, seq
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise DomainError("invalid_request", "pageToken is not a token this API issued") from None


def run_logs(
    *, space: str, trigger_uid: str, scheduled_time: str, page: PageRequest = FIRST_PAGE
) -> LogPage[RunLine]:
    """The ``page`` of the log lines of every delivery of one recorded cron match (see module doc).

    Raises ``DomainError``: ``not_found`` (not a live WorkerCronTrigger of ``space``, or no
    recorded match at that ``scheduledTime``), ``invalid_request``.
    """
    at = parse_scheduled_time(scheduled_time)
    delivery, after = _decode_run_token(page.token)
    size = instance_pages.page_size(page.limit, default=DEFAULT_PAGE)
    with models_db.session_scope() as session:
        trigger = session.get(res_models.Resource, trigger_uid)
        if (
            trigger is None
            or trigger.space != space
            or trigger.form != "WorkerCronTrigger"
            or trigger.deleted_at is not None
        ):
            raise DomainError("not_found", "no such WorkerCronTrigger in this Space")
        match_pk = session.scalar(
            sa.select(cron_models.CronMatch.pk).where(
                cron_models.CronMatch.trigger_uid == trigger_uid, cron_models.CronMatch.scheduled_time == at
            )
        )
        if match_pk is None:
            raise DomainError("not_found", "no recorded run of this trigger at that scheduledTime")
        rows = log_sql.match_page_txn(session, match_pk=match_pk, delivery=delivery, after=after, limit=size)
    logs = [RunLine(time=row.logged_at, delivery=row.n, stream=row.stream, message=row.message) for row in rows]
    removed = 0
    seen: set[int] = set()
    for row in rows:
        if row.delivery_pk not in seen:
            seen.add(row.delivery_pk)
            removed += max(0, row.first - 1)
    token = _encode_run_token(rows[-1].n, rows[-1].seq) if rows else _encode_run_token(delivery, after)
    return LogPage(logs=logs, next_page_token=token, removed_lines=removed)
