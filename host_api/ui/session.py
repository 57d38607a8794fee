"""Who is signed in to the console, and the CSRF check of its actions.

Signing in takes a Space token (the same tokens as the API, docs/spec/http-api.md#api-auth) and starts a
server-side session (``services.console_sessions``, docs/spec/host-features.md#hf-neighbours): the cookie holds only a
random session id, never the token, and the page's scripts cannot read it (``HttpOnly``); it is
sent only to ``/ui`` and only by this site's own pages (``SameSite=Strict``; ``Secure`` when the
request came over HTTPS, also as seen through ``TAKOHOST_TRUSTED_PROXIES``). Every request checks
the session in Postgres: signing out, deleting the token, ``TAKOHOST_CONSOLE_IDLE_SECONDS``
without a request or ``TAKOHOST_CONSOLE_SESSION_SECONDS`` after sign-in end it at once in every
API process, and a copied cookie stops working with it. The Space is never taken from the URL:
every page reads only the session's Space.

Actions (send an event, terminate, sign out) are POST forms that carry the session's own CSRF
token (random, made at sign-in, kept in the session's row): another site can neither read it nor
make the browser send the cookie. A POST whose ``Origin`` header names another origin is refused
as well. Sign-in has no CSRF token to check (no one is signed in yet), so :func:`check_origin`
alone refuses a cross-site one (``null`` too): another site cannot sign a visitor in to the
attacker's Space (login CSRF), where the events and payloads they then type would land.
"""

from __future__ import annotations

import dataclasses
import hmac
import urllib.parse

import flask
from werkzeug.wrappers import Response

from host_api import db
from models import base as models_base
from services import console_sessions

COOKIE = "takohost_console"
COOKIE_PATH = "/ui"


@dataclasses.dataclass(frozen=True)
class SignedIn:
    """The signed-in Space, the session id (never shown on a page) and its CSRF token (hex)."""

    space: str
    session_id: str
    csrf: str


class NotSignedIn(Exception):
    """No live console session: the view answers with the sign-in page."""


def _lifetimes() -> dict[str, float]:
    settings = flask.current_app.config["TAKOHOST_SETTINGS"]
    return {"idle_s": settings.console_idle_s, "lifetime_s": settings.console_session_s}


def current() -> SignedIn:
    """The signed-in Space of this request (cached in ``flask.g``); extends the session.

    Raises:
        NotSignedIn: no cookie, or its session is unknown, ended or expired.
    """
    cached = getattr(flask.g, "console_user", None)
    if cached is not None:
        return cached
    session_id = flask.request.cookies.get(COOKIE, "")
    live = None
    if session_id:
        with db.session() as session:
            live = console_sessions.touch_txn(session, session_id=session_id, now=models_base.utcnow(),
                                              **_lifetimes())
    if live is None:
        raise NotSignedIn()
    flask.g.console_user = SignedIn(space=live.space, session_id=session_id, csrf=live.csrf)
    return flask.g.console_user


def check_origin(*, allow_null: bool) -> None:
    """Refuse a POST that the browser says came from another site: an ``Origin`` of another
    origin (or ``null``, unless ``allow_null``), or ``Sec-Fetch-Site: cross-site``.

    Raises:
        PermissionError: answered as ``403``.
    """
    origin = flask.request.headers.get("Origin")
    if origin is not None and (origin != "null" or not allow_null):
        here = urllib.parse.urlsplit(flask.request.host_url)
        there = urllib.parse.urlsplit(origin)
        if (there.scheme, there.netloc) != (here.scheme, here.netloc):
            raise PermissionError("this form was posted from another site")
    if flask.request.headers.get("Sec-Fetch-Site") == "cross-site":
        raise PermissionError("this form was posted from another site")


def check_post(user: SignedIn) -> None:
    """Refuse a POST without this sign-in's CSRF token or from another origin.

    Raises:
        PermissionError: with the reason, answered as ``403``.
    """
    check_origin(allow_null=True)
    if not hmac.compare_digest(flask.request.form.get("csrf", ""), user.csrf):
        raise PermissionError("the form's CSRF token is missing or wrong: reload the page and try again")


def sign_in(response: Response, token: str) -> bool:
    """Start a session for ``token`` and set its cookie on ``response``; ``False`` (nothing
    set) for a token that is not valid for any Space."""
    with db.session() as session:
        made = console_sessions.create_txn(session, token=token, now=models_base.utcnow(), **_lifetimes())
    if made is None:
        return False
    session_id, _ = made
    response.set_cookie(
        COOKIE,
        session_id,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=flask.request.is_secure,
    )
    return True


def sign_out(response: Response, user: SignedIn) -> None:
    """End ``user``'s session (a copy of its cookie stops working) and clear the cookie."""
    with db.session() as session:
        console_sessions.revoke_txn(session, session_id=user.session_id)
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="Strict",
                           secure=flask.request.is_secure)
