"""Bearer-token authentication and Space scoping (docs/spec/http-api.md#api-auth, API-auth)."""

from __future__ import annotations

import time

import flask
import sqlalchemy as sa

from host_api import db
from host_api.errors import ApiError
from models import resources as res_models
from services import tokens

PUBLIC_ENDPOINTS = {"meta.healthz", "meta.openapi", "static"}
#: Blueprints that authenticate by themselves: the web console signs in with the same tokens but
#: keeps a session id in its own cookie (``host_api.ui.session``), never a bearer header.
SELF_AUTHENTICATING_BLUEPRINTS = {"ui"}


#: Seconds a known token's Space is remembered by an API process (docs/spec/host-features.md#hf-performance: no database
#: transaction per request). A token deleted from the database is refused by every API process at
#: most this long after (docs/security.md); an unknown token is never remembered.
TOKEN_CACHE_SECONDS = 5.0
#: Remembered tokens per process (the memo is cleared when full).
TOKEN_CACHE_SIZE = 10_000
_known: dict[tuple[str, str], tuple[str, float]] = {}


def _space_of(token_hash: str) -> str | None:
    """The Space of the token with ``token_hash`` on this app's database, or ``None``."""
    url = flask.current_app.config["TAKOHOST_DATABASE_URL"]
    now = time.monotonic()
    known = _known.get((url, token_hash))
    if known is not None and known[1] > now:
        return known[0]
    with db.session() as session:
        space = session.scalar(sa.select(res_models.Token.space).where(res_models.Token.token_hash == token_hash))
    if space is not None:
        if len(_known) >= TOKEN_CACHE_SIZE:
            _known.clear()
        _known[(url, token_hash)] = (space, now + TOKEN_CACHE_SECONDS)
    return space


def authenticate() -> None:
    """``before_request`` hook: resolve the token to its Space into ``flask.g.space``.

    Missing/unknown token → ``401 unauthenticated``; a token of another Space than the URL's
    ``{space}`` → ``404 not_found`` (never reveal that the Space exists).
    """
    if flask.request.endpoint in PUBLIC_ENDPOINTS or flask.request.blueprint in SELF_AUTHENTICATING_BLUEPRINTS:
        return
    header = flask.request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError("unauthenticated", "missing or malformed Authorization: Bearer <token> header")
    space = _space_of(tokens.hash_token(token.strip()))
    if space is None:
        raise ApiError("unauthenticated", "unknown token")
    url_space = (flask.request.view_args or {}).get("space")
    if url_space is not None and url_space != space:
        # Same code as an unknown Space (never reveal that it exists), but say what to check.
        raise ApiError(
            "not_found",
            f"this token does not grant Space {url_space!r}: the Space or the token is wrong",
        )
    flask.g.space = space
