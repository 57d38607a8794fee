"""Tenant logs for the console, read through the JSON API itself.

The logs of an instance (``GET /v2/spaces/{space}/resources/{uid}/instances/{id}/logs``) and of a
cron run are served by the API's own routes; the console asks them in-process, with the signed-in
token as the bearer, so it shows exactly what the API answers and follows it as it changes. A
route that is not there (``404``) means this host keeps no logs for it: the panel says so
instead of failing. Any other error is shown as the API put it.
"""

from __future__ import annotations

import dataclasses
import urllib.parse

import flask

#: Log lines the console reads for one panel (pages of the API followed up to this many).
MAX_LINES = 2000


@dataclasses.dataclass
class Logs:
    """What the logs panel shows: ``available`` False → "no logs available"; ``error`` is the
    API's ``code: message`` when it refused; ``lines`` are the entries as the API gave them;
    ``truncated`` when more than :data:`MAX_LINES` exist."""

    available: bool
    lines: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    truncated: bool = False


def instance_logs_path(space: str, workflow_uid: str, instance_id: str) -> str:
    """The API path of an instance's logs (the id percent-encoded as one segment)."""
    return (
        f"/v2/spaces/{urllib.parse.quote(space, safe='')}/resources/{urllib.parse.quote(workflow_uid, safe='')}"
        f"/instances/{urllib.parse.quote(instance_id, safe='')}/logs"
    )


def fetch(path: str, *, token: str) -> Logs:
    """Read every page of the logs at API ``path`` (up to :data:`MAX_LINES` lines) with ``token``."""
    client = flask.current_app.test_client()
    lines: list[dict] = []
    page_token = None
    while True:
        query = {} if page_token is None else {"pageToken": page_token}
        response = client.get(path, query_string=query, headers={"Authorization": f"Bearer {token}"})
        if response.status_code == 404 and not lines:
            body = response.get_json(silent=True) or {}
            code = (body.get("error") or {}).get("code")
            if code in (None, "not_found"):
                return Logs(available=False)
        if response.status_code != 200:
            error = (response.get_json(silent=True) or {}).get("error") or {}
            return Logs(
                available=True,
                lines=lines,
                error=f"{error.get('code', response.status_code)}: {error.get('message', '')}",
            )
        body = response.get_json(silent=True) or {}
        entries = next((v for k, v in body.items() if isinstance(v, list) and k != "nextPageToken"), [])
        lines.extend(e if isinstance(e, dict) else {"message": str(e)} for e in entries)
        page_token = body.get("nextPageToken")
        if not page_token or not entries:
            return Logs(available=True, lines=lines[:MAX_LINES])
        if len(lines) >= MAX_LINES:
            return Logs(available=True, lines=lines[:MAX_LINES], truncated=True)


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
