"""Web-console sessions (docs/spec/host-features.md#hf-neighbours): a random id in the browser, its row in Postgres.

Signing in with a Space token creates a session: a random id (``secrets.token_urlsafe(32)``,
256 bits) that only the browser's cookie holds — the table keeps its SHA-256 — and a CSRF token
of its own. A session ends at sign-out (its row is deleted), when its token is deleted (``ON
DELETE CASCADE`` from ``tokens``), after ``idle_s`` seconds without a request
(``TAKOHOST_CONSOLE_IDLE_SECONDS``) and ``lifetime_s`` seconds after sign-in whatever happens
(``TAKOHOST_CONSOLE_SESSION_SECONDS``). Each request checks and extends the session in one
conditional ``UPDATE … RETURNING``, so every API process agrees at once (no memo).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import secrets

import sqlalchemy as sa
from sqlalchemy import orm

from models import resources as res_models
from services import tokens


@dataclasses.dataclass(frozen=True)
class Live:
    """A live session: its Space and its CSRF token (hex)."""

    space: str
    csrf: str


def hash_id(session_id: str) -> str:
    """SHA-256 hex of a session id (what ``console_sessions.id_hash`` stores)."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def _expired(*, now: dt.datetime, idle_s: float, lifetime_s: float) -> sa.ColumnElement[bool]:
    table = res_models.ConsoleSession
    return sa.or_(table.last_seen_at <= now - dt.timedelta(seconds=idle_s),
                  table.created_at <= now - dt.timedelta(seconds=lifetime_s))


def create_txn(session: orm.Session, *, token: str, now: dt.datetime, idle_s: float,
               lifetime_s: float) -> tuple[str, Live] | None:
    """Sign in with ``token``: ``(session id, Live)``, or ``None`` for an unknown token. Sessions
    past their time (anyone's) are deleted on the way."""
    found = session.execute(
        sa.select(res_models.Token.id, res_models.Token.space).where(
            res_models.Token.token_hash == tokens.hash_token(token))
    ).first()
    if found is None:
        return None
    session.execute(sa.delete(res_models.ConsoleSession).where(
        _expired(now=now, idle_s=idle_s, lifetime_s=lifetime_s)))
    session_id = secrets.token_urlsafe(32)
    csrf = secrets.token_hex(32)
    session.add(res_models.ConsoleSession(id_hash=hash_id(session_id), token_id=found.id, csrf=csrf,
                                          created_at=now, last_seen_at=now))
    return session_id, Live(space=found.space, csrf=csrf)


def touch_txn(session: orm.Session, *, session_id: str, now: dt.datetime, idle_s: float,
              lifetime_s: float) -> Live | None:
    """The live session ``session_id``, its last use moved to ``now``; ``None`` if it is unknown,
    signed out, past its idle timeout or lifetime, or its token was deleted."""
    table = res_models.ConsoleSession
    row = session.execute(
        sa.update(table)
        .where(table.id_hash == hash_id(session_id), table.token_id == res_models.Token.id,
               sa.not_(_expired(now=now, idle_s=idle_s, lifetime_s=lifetime_s)))
        .values(last_seen_at=now)
        .returning(res_models.Token.space, table.csrf)
    ).first()
    return None if row is None else Live(space=row.space, csrf=row.csrf)


def revoke_txn(session: orm.Session, *, session_id: str) -> None:
    """End session ``session_id`` (sign-out); nothing if it is already gone."""
    session.execute(sa.delete(res_models.ConsoleSession).where(
        res_models.ConsoleSession.id_hash == hash_id(session_id)))
