"""Spaces and bearer tokens (docs/spec/http-api.md#api-auth): tokens are stored as SHA-256 digests only."""

from __future__ import annotations

import hashlib
import re
import secrets

from sqlalchemy import orm
from sqlalchemy.dialects import postgresql

from models import resources as res_models
from models.errors import DomainError

SPACE_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def hash_token(token: str) -> str:
    """SHA-256 hex digest of ``token`` (what the ``tokens`` table stores)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create_token_txn(session: orm.Session, *, space: str) -> str:
    """Create Space ``space`` if needed and a new token for it; returns the token.

    The token is ``tko_`` + 43 URL-safe random characters (256 bits); only its hash is kept.

    Raises:
        DomainError: ``invalid_request`` when ``space`` is not a valid Space name.
    """
    if not SPACE_RE.fullmatch(space):
        raise DomainError("invalid_request", f"invalid Space name {space!r}: use ^[a-z0-9]([a-z0-9-]{{0,61}}[a-z0-9])?$")
    session.execute(postgresql.insert(res_models.Space).values(name=space).on_conflict_do_nothing())
    token = "tko_" + secrets.token_urlsafe(32)
    session.add(res_models.Token(space=space, token_hash=hash_token(token)))
    return token
