"""Who is signed in to the console, and the CSRF check of its actions.

Signing in takes a Space token (the same tokens as the API, CONTRACT §2.1) and keeps it in a
cookie the page's scripts cannot read (``HttpOnly``), sent only to ``/ui`` and only by this site's
own pages (``SameSite=Strict``; ``Secure`` when the request came over HTTPS). Every request
resolves the token to its Space as the API does (``host_api.auth``: a deleted token is refused
within its few seconds of memo), and the Space is never taken from the URL: every page reads
only the token's Space.

Actions (send an event, terminate, sign out) are POST forms that carry a CSRF token,
``HMAC-SHA256(key=token, "takohost console csrf")``: another site can neither read it nor make
the browser send the cookie, and it needs no server-side secret, so every API process agrees on
it. A POST whose ``Origin`` header names another origin is refused as well. Sign-in has no CSRF
token to check (no one is signed in yet), so :func:`check_origin` alone refuses a cross-site one
(``null`` too): another site cannot sign a visitor in to the attacker's Space (login CSRF), where
the events and payloads they then type would land.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import urllib.parse

import flask

from host_api import auth
from services import tokens

COOKIE = "takohost_console"
COOKIE_PATH = "/ui"
_CSRF_MESSAGE = b"takohost console csrf"


@dataclasses.dataclass(frozen=True)
class SignedIn:
    """The signed-in Space and the token that proves it (never shown on a page)."""

    space: str
    token: str

    @property
    def csrf(self) -> str:
        """The CSRF token of this sign-in (hex)."""
        return csrf_token(self.token)


class NotSignedIn(Exception):
    """No valid console cookie: the view answers with the sign-in page."""


def csrf_token(token: str) -> str:
    """``HMAC-SHA256(key=token, "takohost console csrf")`` as hex."""
    return hmac.new(token.encode("utf-8", "surrogatepass"), _CSRF_MESSAGE, hashlib.sha256).hexdigest()


def space_of(token: str) -> str | None:
    """The Space of ``token``, or None for an unknown token (the API's own lookup, with its
    per-process memo of known tokens: ``host_api.auth``)."""
    return auth._space_of(tokens.hash_token(token))


def current() -> SignedIn:
    """The signed-in Space of this request (cached in ``flask.g``).

    Raises:
        NotSignedIn: no cookie, or its token is unknown (revoked).
    """
    cached = getattr(flask.g, "console_user", None)
    if cached is not None:
        return cached
    token = flask.request.cookies.get(COOKIE, "")
    space = space_of(token) if token else None
    if space is None:
        raise NotSignedIn()
    flask.g.console_user = SignedIn(space=space, token=token)
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


def sign_in(response: flask.Response, token: str) -> None:
    """Set the console cookie on ``response``."""
    response.set_cookie(
        COOKIE,
        token,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=flask.request.is_secure,
    )


def sign_out(response: flask.Response) -> None:
    """Clear the console cookie on ``response``."""
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="Strict")
