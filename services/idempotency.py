"""Idempotency-Key records (docs/spec/http-api.md#api-op, API-op): the database decides "same key, same request".

A key is claimed with ``INSERT … ON CONFLICT DO NOTHING RETURNING`` inside the accepting
transaction, before any rule runs: a concurrent request with the same key waits on the unique
index until the first commits (then it replays) or rolls back (then it proceeds itself). A
rejected request rolls its claim back with everything else, so only accepted requests keep keys.
Keys are kept ``RETENTION`` (31 days; the contract asks for at least 30).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import orm

from models import resource_sql
from models import resources as res_models
from models.errors import DomainError

RETENTION = dt.timedelta(days=31)


@dataclasses.dataclass(frozen=True)
class KeyedRequest:
    """A request that carries an Idempotency-Key: ``key`` as the client sent it and
    ``request_hash``, the fingerprint of its method, path and body
    (``host_api.body.request_fingerprint``, hex). The same key with another fingerprint is
    ``idempotency_key_reused``."""

    key: str
    request_hash: str


@dataclasses.dataclass(frozen=True)
class Claim:
    """The outcome of :func:`claim_txn`: ``new`` when this request owns the key now; otherwise
    ``record`` is the first request's record (same fingerprint) to replay."""

    new: bool
    record: res_models.IdempotencyRecord | None


def claim_txn(
    session: orm.Session,
    *,
    space: str,
    request: KeyedRequest,
    operation_id: str | None,
    now: dt.datetime,
) -> Claim:
    """Claim ``request.key`` in ``space`` for a request with fingerprint ``request.request_hash``.

    ``operation_id`` is the Operation this request will create (None for calls answered
    directly; record their answer later with :func:`store_response_txn`).

    Raises:
        DomainError: ``idempotency_key_reused`` (422) when the key was used for another request.
    """
    if resource_sql.claim_key_txn(
        session,
        space=space,
        key=request.key,
        request_hash=request.request_hash,
        operation_id=operation_id,
        now=now,
    ):
        return Claim(new=True, record=None)
    record = session.get(res_models.IdempotencyRecord, (space, request.key), populate_existing=True)
    if record is None:  # the holder rolled back between our insert and read: rare; ask for a retry
        raise DomainError(
            "resource_busy", "a concurrent request with this Idempotency-Key just failed; retry"
        )
    if record.request_hash != request.request_hash:
        raise DomainError(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different request (method, path or body differ)",
        )
    return Claim(new=False, record=record)


def store_response_txn(session: orm.Session, *, space: str, key: str, status: int, body: dict) -> None:
    """Remember the answer of a directly-answered call (e.g. ``send_event``) for replay."""
    resource_sql.store_response_txn(session, space=space, key=key, status=status, body=body)


def purge_expired_txn(session: orm.Session, *, now: dt.datetime) -> int:
    """Delete keys older than :data:`RETENTION`; returns how many."""
    return resource_sql.purge_keys_before_txn(session, before=now - RETENTION)
