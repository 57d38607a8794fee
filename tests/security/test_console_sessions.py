"""Console sessions are sessions (docs/spec/host-features.md#hf-neighbours), attacked as someone holding a copy of the
cookie, or sitting in front of (or pretending to be) a TLS proxy would.

Before: the console's cookie was the raw API token itself, signing out only cleared it in that
browser (a copied cookie went on working), the CSRF token was derived from the token and never
changed, and behind a TLS-terminating proxy sign-in was refused (the ``Origin`` was https, the
request looked like http) and the cookie lacked ``Secure``. In-process, on this session's
database (``services.console_sessions``, ``host_api.ui.session``).
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid

import pytest
import sqlalchemy as sa

from core import config
from host_api.app import create_app
from models import db as models_db
from models import resources as res_models
from services import console_sessions, tokens

COOKIE = "takohost_console"


@pytest.fixture()
def token(db_url):
    with models_db.session_scope(db_url) as session:
        return tokens.create_token_txn(session, space=f"s{uuid.uuid4().hex[:12]}")


def _app(**settings):
    app = create_app(dataclasses.replace(config.load_settings(), **settings))
    app.testing = True
    return app


def _sign_in(client, token: str, **kwargs) -> str:
    """Sign ``client`` in; returns the session's cookie value."""
    response = client.post("/ui/sign-in", data={"token": token}, **kwargs)
    assert response.status_code == 303, response.data[:300]
    cookie = client.get_cookie(COOKIE, path="/ui")
    assert cookie is not None
    return cookie.value


def _csrf(client) -> str:
    page = client.get("/ui/workflows")
    assert page.status_code == 200
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)


def _signed_in(app, cookie: str) -> bool:
    """Whether a fresh browser holding only a copy of ``cookie`` is signed in."""
    thief = app.test_client()
    thief.set_cookie(COOKIE, cookie, path="/ui")
    return thief.get("/ui/workflows").status_code == 200


def test_the_cookie_is_a_random_session_id_never_the_token(app, token, db_url):
    client = app.test_client()
    cookie = _sign_in(client, token)
    assert token not in cookie and cookie != tokens.hash_token(token)
    assert len(cookie) >= 43  # 256 random bits, URL-safe
    second = _sign_in(app.test_client(), token)
    assert second != cookie  # a new session each sign-in, not a function of the token
    with models_db.session_scope(db_url) as session:
        stored = session.scalars(sa.select(res_models.ConsoleSession.id_hash)).all()
    assert console_sessions.hash_id(cookie) in stored and cookie not in stored  # only its hash is kept


def test_a_copied_cookie_stops_working_at_sign_out(app, token):
    client = app.test_client()
    cookie = _sign_in(client, token)
    assert _signed_in(app, cookie)
    out = client.post("/ui/sign-out", data={"csrf": _csrf(client)})
    assert out.status_code == 303
    assert not _signed_in(app, cookie)


def test_deleting_the_token_ends_its_sessions(app, token, db_url):
    cookies = [_sign_in(app.test_client(), token) for _ in range(2)]
    assert all(_signed_in(app, cookie) for cookie in cookies)
    with models_db.session_scope(db_url) as session:
        session.execute(sa.delete(res_models.Token).where(res_models.Token.token_hash == tokens.hash_token(token)))
    assert not any(_signed_in(app, cookie) for cookie in cookies)
    with models_db.session_scope(db_url) as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(res_models.ConsoleSession).where(
            res_models.ConsoleSession.id_hash.in_([console_sessions.hash_id(c) for c in cookies]))) == 0


def test_the_csrf_token_is_per_session(app, token):
    one, two = app.test_client(), app.test_client()
    _sign_in(one, token)
    _sign_in(two, token)
    csrf_one, csrf_two = _csrf(one), _csrf(two)
    assert csrf_one != csrf_two and token not in csrf_one
    assert two.post("/ui/sign-out", data={"csrf": csrf_one}).status_code == 403  # another session's
    assert one.post("/ui/sign-out", data={"csrf": csrf_one}).status_code == 303
    _sign_in(one, token)  # signing in again: a new session, a new CSRF token
    assert _csrf(one) not in (csrf_one, csrf_two)


def test_idle_timeout_and_absolute_lifetime(token):
    idle = _app(console_idle_s=1.0, console_session_s=60.0)
    cookie = _sign_in(idle.test_client(), token)
    assert _signed_in(idle, cookie)
    time.sleep(1.3)
    assert not _signed_in(idle, cookie)  # idle too long

    capped = _app(console_idle_s=60.0, console_session_s=2.0)
    cookie = _sign_in(capped.test_client(), token)
    for _ in range(3):  # in use all along: it still ends 2 s after sign-in
        assert _signed_in(capped, cookie)
        time.sleep(0.5)
    time.sleep(0.8)
    assert not _signed_in(capped, cookie)


PROXIED = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "console.example", "X-Forwarded-For": "203.0.113.7"}


def test_behind_a_trusted_tls_proxy_sign_in_works_with_a_secure_cookie_and_hsts(token):
    app = _app(trusted_proxies=1)
    client = app.test_client()
    answer = client.post("/ui/sign-in", data={"token": token},
                         headers={**PROXIED, "Origin": "https://console.example", "Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 303, answer.data[:300]
    set_cookie = answer.headers["Set-Cookie"]
    assert set_cookie.startswith(f"{COOKIE}=") and "Secure" in set_cookie and "HttpOnly" in set_cookie
    assert answer.headers["Strict-Transport-Security"].startswith("max-age=")
    location = answer.headers["Location"]
    assert location in ("/ui/workflows", "https://console.example/ui/workflows"), location
    cookie = set_cookie.split(";", 1)[0].split("=", 1)[1]
    page = app.test_client(use_cookies=False).get("/ui/workflows", headers={**PROXIED, "Cookie": f"{COOKIE}={cookie}"})
    assert page.status_code == 200 and page.headers["Strict-Transport-Security"].startswith("max-age=")
    # The JSON API answers over the proxy's HTTPS with HSTS too.
    assert app.test_client().get("/healthz", headers=PROXIED).headers.get("Strict-Transport-Security")
    # Plain HTTP to the same app (no forwarded scheme): no HSTS, no Secure cookie.
    plain = app.test_client().post("/ui/sign-in", data={"token": token})
    assert plain.status_code == 303 and "Secure" not in plain.headers["Set-Cookie"]
    assert "Strict-Transport-Security" not in plain.headers


def test_without_the_setting_forwarded_headers_are_ignored(app, token):
    forged = app.test_client().post("/ui/sign-in", data={"token": token}, headers=PROXIED)
    assert forged.status_code == 303
    assert "Secure" not in forged.headers["Set-Cookie"]  # the request came over http, whatever it says
    assert "Strict-Transport-Security" not in forged.headers
    assert not forged.headers["Location"].startswith("https://console.example")
    # An https Origin does not match the http request: refused as another site's form.
    cross = app.test_client().post("/ui/sign-in", data={"token": token},
                                   headers={**PROXIED, "Origin": "https://console.example"})
    assert cross.status_code == 403
    assert COOKIE not in cross.headers.get("Set-Cookie", "")
