"""Tenant logs for the console, read through the JSON API itself.

The logs of an instance (``GET /v2/spaces/{space}/resources/{uid}/instances/{id}/logs``) and of a
cron run are served by the API's own routes; the console asks them in-process, with the signed-in
token as the bearer, so it shows exactly what the API answers and follows it as it changes. A
route that is not there (``404``) means this host keeps no logs for it: the panel says so
instead of failing. Any other error is shown as the API put it. :func:`api_get` is the one
in-process call (also used for the "where is it" view, ``…/instances/{id}/progress``).
"""

from __future__ import annotations

import dataclasses
import urllib.parse

import flask

#: Log lines the console reads for one panel (pages of the API followed up to this many).
MAX_LINES = 2000
#: Lines asked per page; a shorter page is the last one (the logs API always answers a
#: ``nextPageToken``, a cursor to follow later lines with).
PAGE = 500


@dataclasses.dataclass
class Logs:
    """What the logs panel shows: ``available`` False → "no logs available"; ``error`` is the
    API's ``code: message`` when it refused; ``lines`` are the entries as the API gave them;
    ``truncated`` when more than :data:`MAX_LINES` exist; ``removed``: the oldest lines the host
    dropped at its cap (the API's ``removedLines``)."""

    available: bool
    lines: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    truncated: bool = False
    removed: int = 0


def instance_path(space: str, workflow_uid: str, instance_id: str, action: str) -> str:
    """The API path ``…/instances/{id}/{action}`` (the id percent-encoded as one segment)."""
    return (
        f"/v2/spaces/{urllib.parse.quote(space, safe='')}/resources/{urllib.parse.quote(workflow_uid, safe='')}"
        f"/instances/{urllib.parse.quote(instance_id, safe='')}/{action}"
    )


def api_get(path: str, *, token: str, query: dict | None = None) -> tuple[int, dict]:
    """``GET path`` of this app's JSON API, in-process, as the bearer of ``token``: ``(HTTP
    status, JSON body or {})``. The request runs through the API's own hooks (authentication,
    Space check, routing), so it answers exactly what a client would get."""
    client = flask.current_app.test_client()
    response = client.get(path, query_string=query or {}, headers={"Authorization": f"Bearer {token}"})
    body = response.get_json(silent=True)
    return response.status_code, body if isinstance(body, dict) else {}


def route_missing(status: int, body: dict) -> bool:
    """True when the API has no such route (a ``404`` whose code is ``not_found``), as opposed to
    an instance or resource it does not know (``unknown_instance``)."""
    return status == 404 and (body.get("error") or {}).get("code") in (None, "not_found")


def fetch(path: str, *, token: str) -> Logs:
    """Read every page of the logs at API ``path`` (up to :data:`MAX_LINES` lines) with ``token``."""
    lines: list[dict] = []
    page_token = None
    removed = 0
    while True:
        query = {"limit": PAGE} if page_token is None else {"limit": PAGE, "pageToken": page_token}
        status, body = api_get(path, token=token, query=query)
        if route_missing(status, body) and not lines:
            return Logs(available=False)
        if status != 200:
            error = body.get("error") or {}
            return Logs(
                available=True, lines=lines, error=f"{error.get('code', status)}: {error.get('message', '')}"
            )
        if page_token is None and isinstance(body.get("removedLines"), int):
            removed = body["removedLines"]
        entries = body.get("logs")
        if not isinstance(entries, list):
            entries = next((v for v in body.values() if isinstance(v, list)), [])
        lines.extend(e if isinstance(e, dict) else {"message": str(e)} for e in entries)
        page_token = body.get("nextPageToken")
        if not page_token or len(entries) < PAGE:
            return Logs(available=True, lines=lines[:MAX_LINES], removed=removed)
        if len(lines) >= MAX_LINES:
            return Logs(available=True, lines=lines[:MAX_LINES], truncated=True, removed=removed)


def line_text(entry: dict) -> str:
    """The message of one log entry, whatever the API calls it."""
    for key in ("message", "line", "text", "msg"):
        if isinstance(entry.get(key), str):
            return entry[key]
    return str(entry)


def line_time(entry: dict) -> str:
    """The time of one log entry (RFC 3339 text), or ``""``."""
    for key in ("timestamp", "time", "at", "loggedAt", "ts"):
        if isinstance(entry.get(key), str):
            return entry[key]
    return ""
