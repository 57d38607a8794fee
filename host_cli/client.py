"""A small HTTP client of the Host API (docs/spec/http-api.md), used by the ``takohost`` CLI.

One method per API call; answers are the decoded JSON bodies (``dict``), exactly as docs/spec/http-api.md
shapes them. Every error answer becomes :class:`ClientError` ``(code, message, status)`` from the
``{"error": {"code", "message", "details"?}}`` envelope (§2.4); a host that cannot be reached
becomes :class:`HostUnreachable` (code ``unreachable``).

Retries: only calls that are safe to repeat are retried, and only when the request did not get
an answer (connection refused/reset, read timeout): ``GET``s, mutations carrying an
``Idempotency-Key`` (the host answers a repeated key with the same Operation, §2.3), ``send_event``
with a key, and ``terminate`` (idempotent: terminating a terminal instance succeeds, docs/spec/durable-workflow.md#dw-terminate).
``create_instance`` is never retried: a lost answer is resolved by the caller (a repeated create
with the same id answers ``instance_exists``, docs/spec/durable-workflow.md).

Instance ids are arbitrary Unicode (API-inst-id) and are sent as ONE path segment:
``urllib.parse.quote(id, safe="")``; an id of only dots (``.``, ``..``) has its dots sent as
``%2E`` so that no URL normaliser mistakes it for a dot segment. The prepared URL is sent
byte-for-byte as built here (``requests`` would otherwise re-unquote ``%2E``).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import requests
import tenacity

from takohost.domain import deepjson
from takohost.domain.forms import FORM_URLS

__all__ = [
    "FORM_URLS",
    "TERMINAL_OPERATION_STATES",
    "TERMINAL_STATUSES",
    "Client",
    "ClientError",
    "HostUnreachable",
    "encode_segment",
]

TERMINAL_STATUSES = frozenset({"complete", "errored", "terminated"})
TERMINAL_OPERATION_STATES = frozenset({"succeeded", "failed"})

_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD"})


class ClientError(Exception):
    """The host answered with an error: ``code`` (docs/spec/http-api.md#api-errors), ``message``, HTTP ``status``.

    ``details`` is the envelope's optional ``details`` object (``{}`` when absent). ``status`` is
    ``None`` when no HTTP answer was received (:class:`HostUnreachable`).
    """

    def __init__(
        self, code: str, message: str, status: int | None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(code, message, status)
        self.code = code
        self.message = message
        self.status = status
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class HostUnreachable(ClientError):
    """No answer from the host (connection refused/reset or timed out after the retries)."""


def encode_segment(value: str) -> str:
    """Percent-encode ``value`` as one URL path segment (``/``, ``%``, ``?``, ``#`` included).

    ``"a/b c"`` → ``"a%2Fb%20c"``; ``"."`` → ``"%2E"``, ``".."`` → ``"%2E%2E"`` (dot segments).
    """
    segment = urllib.parse.quote(value, safe="")
    if segment.strip(".") == "":
        segment = segment.replace(".", "%2E")
    return segment


class Client:
    """A Host API client for one Space.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8080"`` (a trailing ``/`` is ignored).
        token: the bearer token (``takohost token create``).
        space: the Space name the token grants.
        timeout: seconds to wait for each HTTP answer.
        retry_attempts: attempts for retryable calls (see the module docstring); ``1`` disables.
        retry_wait: seconds before the first retry (doubling, at most 2 s between attempts).
        session: a ``requests.Session`` to use (tests mount adapters on it).
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        space: str,
        timeout: float = 60.0,
        retry_attempts: int = 4,
        retry_wait: float = 0.25,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.space = space
        self._token = token
        self._timeout = timeout
        self._retry_attempts = max(1, retry_attempts)
        self._retry_wait = retry_wait
        self._session = session or requests.Session()

    # --- plumbing ---------------------------------------------------------------------------

    def _space_path(self, *segments: str) -> str:
        return "/".join(["/v2/spaces", encode_segment(self.space), *segments])

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        retry: bool | None = None,
        authenticated: bool = True,
    ) -> Any:
        """Send one call and return the decoded JSON answer; raise :class:`ClientError` otherwise.

        ``retry`` defaults to "safe to repeat": a GET, or a call with an ``Idempotency-Key``.
        """
        url = self.base_url + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        headers = {"Accept": "application/json"}
        if authenticated:
            headers["Authorization"] = f"Bearer {self._token}"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        data = None
        if body is not None:  # any depth (docs/spec/host-features.md#hf-newcomer): requests' own json= recurses
            headers["Content-Type"] = "application/json"
            data = deepjson.dumps(body).encode("utf-8")
        prepared = requests.Request(method, url, headers=headers, data=data).prepare()
        prepared.url = url  # send our encoding byte-for-byte (requests would unquote %2E)
        if retry is None:
            retry = method in _IDEMPOTENT_METHODS or idempotency_key is not None
        response = self._send(prepared, retry=retry)
        return _decode(response)

    def _send(self, prepared: requests.PreparedRequest, *, retry: bool) -> requests.Response:
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._retry_attempts if retry else 1),
            wait=tenacity.wait_exponential(multiplier=self._retry_wait, min=self._retry_wait, max=2),
            retry=tenacity.retry_if_exception_type((requests.ConnectionError, requests.Timeout)),
            reraise=True,
        )
        try:
            return retrying(self._session.send, prepared, timeout=self._timeout, allow_redirects=False)
        except requests.Timeout:
            raise HostUnreachable(
                "timeout",
                f"no answer from the host at {self.base_url} within "
                f"{self._timeout:g} s (the request may have been applied)",
                None,
            ) from None
        except requests.ConnectionError:
            raise HostUnreachable("unreachable", f"cannot reach the host at {self.base_url}", None) from None

    # --- meta ------------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        """``GET /healthz`` → ``{"ok": true}`` (no token needed)."""
        return self._request("GET", "/healthz", authenticated=False)

    # --- resources and Operations (docs/spec/http-api.md#api-res, docs/spec/http-api.md#api-op) ----------------------------------------

    def create_resource(
        self, *, form: str, name: str, spec: dict[str, Any], idempotency_key: str
    ) -> dict[str, Any]:
        """``POST …/resources`` → the Operation. ``form`` is a Form URL (:data:`FORM_URLS`)."""
        return self._request(
            "POST",
            self._space_path("resources"),
            body={"form": form, "name": name, "spec": spec},
            idempotency_key=idempotency_key,
        )

    def list_resources(self, *, form: str | None = None, page_token: str | None = None) -> dict[str, Any]:
        """``GET …/resources[?form=&pageToken=]`` → ``{"resources": [...], "nextPageToken"?}``."""
        return self._request(
            "GET", self._space_path("resources"), query={"form": form, "pageToken": page_token}
        )

    def iter_resources(self, *, form: str | None = None) -> Iterator[dict[str, Any]]:
        """Every resource (of ``form`` when given), following ``nextPageToken``.

        Resources of other Forms are filtered out here too, whether the host compares ``form``
        with the URL or not.
        """
        for resource in _pages(lambda token: self.list_resources(form=form, page_token=token), "resources"):
            if form is None or resource.get("form") in (form, _short_form(form)):
                yield resource

    def get_resource(self, uid: str) -> dict[str, Any]:
        """``GET …/resources/{uid}`` → the Resource."""
        return self._request("GET", self._space_path("resources", encode_segment(uid)))

    def update_resource(self, uid: str, *, spec: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        """``PUT …/resources/{uid}`` (whole replacement of ``spec``) → the Operation."""
        return self._request(
            "PUT",
            self._space_path("resources", encode_segment(uid)),
            body={"spec": spec},
            idempotency_key=idempotency_key,
        )

    def delete_resource(self, uid: str, *, idempotency_key: str) -> dict[str, Any]:
        """``DELETE …/resources/{uid}`` → the Operation."""
        return self._request(
            "DELETE", self._space_path("resources", encode_segment(uid)), idempotency_key=idempotency_key
        )

    def check_version(self, uid: str, *, terminal: int, idempotency_key: str) -> dict[str, Any]:
        """``POST …/resources/{versionUid}/check`` ``{"terminal"}`` → the ``check`` Operation (docs/spec/host-features.md#hf-testing)."""
        return self._request(
            "POST",
            self._space_path("resources", encode_segment(uid), "check"),
            body={"terminal": terminal},
            idempotency_key=idempotency_key,
        )

    def get_usage(self) -> dict[str, Any]:
        """``GET /v2/spaces/{space}/usage`` → ``{"space", "quotas": {name: {"used", "limit"}}}``."""
        return self._request("GET", self._space_path("usage"))

    def get_operation(self, operation_id: str) -> dict[str, Any]:
        """``GET …/operations/{id}`` → the Operation."""
        return self._request("GET", self._space_path("operations", encode_segment(operation_id)))

    def wait_operation(
        self,
        operation_id: str,
        *,
        timeout: float = 300.0,
        interval: float = 0.2,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the Operation until its ``state`` is ``succeeded`` or ``failed``; return it.

        ``interval`` seconds between polls grows ×1.5 up to 2 s; ``on_poll`` sees every answer.
        Raises :class:`ClientError` ``("timeout", …)`` when still unfinished after ``timeout`` s
        (the Operation goes on in the host; waiting again is safe).
        """
        deadline = time.monotonic() + timeout
        while True:
            operation = self.get_operation(operation_id)
            if on_poll is not None:
                on_poll(operation)
            if operation.get("state") in TERMINAL_OPERATION_STATES:
                return operation
            if time.monotonic() >= deadline:
                raise ClientError(
                    "timeout",
                    f"Operation {operation_id} is still {operation.get('state')} "
                    f"after {timeout:g} s; it goes on in the host",
                    None,
                )
            time.sleep(interval)
            interval = min(interval * 1.5, 2.0)

    # --- instances (docs/spec/http-api.md#api-inst) ------------------------------------------------------------

    def _instances_path(self, workflow_uid: str, *rest: str) -> str:
        return self._space_path("resources", encode_segment(workflow_uid), "instances", *rest)

    def create_instance(
        self, workflow_uid: str, *, instance_id: str | None = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``POST …/instances`` → ``{"id"}``; never retried (see the module docstring)."""
        body: dict[str, Any] = {}
        if instance_id is not None:
            body["id"] = instance_id
        if params is not None:
            body["params"] = params
        return self._request("POST", self._instances_path(workflow_uid), body=body, retry=False)

    def list_instances(
        self,
        workflow_uid: str,
        *,
        status: str | None = None,
        page_token: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """``GET …/instances[?status=&pageToken=&limit=]`` → ``{"instances": [...], "nextPageToken"?}``."""
        return self._request(
            "GET",
            self._instances_path(workflow_uid),
            query={"status": status, "pageToken": page_token, "limit": limit},
        )

    def iter_instances(self, workflow_uid: str, *, status: str | None = None) -> Iterator[dict[str, Any]]:
        """Every instance ``{"id", "status", "createdAt"}``, following ``nextPageToken``."""
        return _pages(
            lambda token: self.list_instances(workflow_uid, status=status, page_token=token), "instances"
        )

    def get_instance(self, workflow_uid: str, instance_id: str) -> dict[str, Any]:
        """``GET …/instances/{id}`` → ``{"id", "status", "output"?, "error"?}``."""
        return self._request("GET", self._instances_path(workflow_uid, encode_segment(instance_id)))

    def get_progress(self, workflow_uid: str, instance_id: str) -> dict[str, Any]:
        """``GET …/instances/{id}/progress`` → ``{"status", "activity", "step"?, "retryAt"?,
        "lastError"?, "wakeAt"?, "eventType"?, "timeoutAt"?, "context"?, "reason"?, "message"?}``
        (docs/operations.md "Where is it?")."""
        return self._request(
            "GET", self._instances_path(workflow_uid, encode_segment(instance_id), "progress")
        )

    def send_event(
        self,
        workflow_uid: str,
        instance_id: str,
        *,
        event_type: str,
        payload: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """``POST …/instances/{id}/events`` → ``{}``; retried only with an ``idempotency_key``."""
        body: dict[str, Any] = {"type": event_type}
        if payload is not None:
            body["payload"] = payload
        return self._request(
            "POST",
            self._instances_path(workflow_uid, encode_segment(instance_id), "events"),
            body=body,
            idempotency_key=idempotency_key,
        )

    def list_events(self, workflow_uid: str, instance_id: str) -> dict[str, Any]:
        """``GET …/instances/{id}/events`` → ``{"events": [{"sequence", "type", "payload"?, "acceptedAt"}]}``."""
        return self._request("GET", self._instances_path(workflow_uid, encode_segment(instance_id), "events"))

    def terminate_instance(self, workflow_uid: str, instance_id: str) -> dict[str, Any]:
        """``POST …/instances/{id}/terminate`` → ``{"status"}`` (retried: terminate is idempotent)."""
        return self._request(
            "POST", self._instances_path(workflow_uid, encode_segment(instance_id), "terminate"), retry=True
        )

    def get_history(
        self, workflow_uid: str, instance_id: str, *, page_token: str | None = None
    ) -> dict[str, Any]:
        """``GET …/instances/{id}/history[?pageToken=]`` → ``{"events": [...], "nextPageToken"?}`` (§6)."""
        return self._request(
            "GET",
            self._instances_path(workflow_uid, encode_segment(instance_id), "history"),
            query={"pageToken": page_token},
        )

    def iter_history(self, workflow_uid: str, instance_id: str) -> Iterator[dict[str, Any]]:
        """Every history event, oldest first, following ``nextPageToken``."""
        return _pages(lambda token: self.get_history(workflow_uid, instance_id, page_token=token), "events")

    def get_logs(self, workflow_uid: str, instance_id: str, *, page_token: str | None = None) -> dict[str, Any]:
        """``GET …/instances/{id}/logs[?pageToken=]`` → ``{"logs": [{"time", "epoch", "step",
        "attempt", "stream", "message"}], "nextPageToken", "removedLines"}`` (the token is a cursor
        after the last line, always present; README "What your code printed, and why it failed")."""
        return self._request(
            "GET",
            self._instances_path(workflow_uid, encode_segment(instance_id), "logs"),
            query={"pageToken": page_token},
        )

    # --- cron runs (docs/spec/cron-trigger.md#cr-runs) ------------------------------------------------------------

    def get_run_logs(
        self, trigger_uid: str, scheduled_time: str, *, page_token: str | None = None
    ) -> dict[str, Any]:
        """``GET …/resources/{uid}/runs/{scheduledTime}/logs[?pageToken=]`` → ``{"logs": [{"time",
        "delivery", "stream", "message"}], "nextPageToken", "removedLines"}``."""
        return self._request(
            "GET",
            self._space_path("resources", encode_segment(trigger_uid), "runs", encode_segment(scheduled_time), "logs"),
            query={"pageToken": page_token},
        )

    def list_runs(self, trigger_uid: str, *, page_token: str | None = None) -> dict[str, Any]:
        """``GET …/resources/{uid}/runs[?pageToken=]`` → ``{"runs": [...], "nextPageToken"?}`` (newest first)."""
        return self._request(
            "GET",
            self._space_path("resources", encode_segment(trigger_uid), "runs"),
            query={"pageToken": page_token},
        )

    def iter_runs(self, trigger_uid: str) -> Iterator[dict[str, Any]]:
        """Every recorded or skipped match of a trigger, newest first, following ``nextPageToken``."""
        return _pages(lambda token: self.list_runs(trigger_uid, page_token=token), "runs")


def _short_form(form: str) -> str:
    for short, url in FORM_URLS.items():
        if url == form:
            return short
    return form


def _pages(fetch: Callable[[str | None], dict[str, Any]], key: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    seen: set[str] = set()
    while True:
        page = fetch(token)
        yield from page.get(key) or []
        token = page.get("nextPageToken")
        if not token or token in seen:  # a repeated token would loop forever
            return
        seen.add(token)


def _decode(response: requests.Response) -> Any:
    """The JSON body of a 2xx answer, or :class:`ClientError` from the error envelope."""
    status = response.status_code
    try:
        body = deepjson.loads(response.content) if response.content else {}
    except ValueError:
        body = None
    if 200 <= status < 300:
        if body is None:
            raise ClientError("bad_response", f"HTTP {status} with a body that is not JSON", status)
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        message = error.get("message")
        details = error.get("details")
        raise ClientError(
            error["code"],
            message if isinstance(message, str) else "",
            status,
            details if isinstance(details, dict) else None,
        )
    reason = response.reason or "error"
    raise ClientError("bad_response", f"HTTP {status} {reason} without a JSON error body", status)
