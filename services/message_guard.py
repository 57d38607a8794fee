"""Refuse every task message this host's own producers never send, before Celery reads it
(docs/spec/host-features.md#hf-isolation: a forged or malformed message can change nothing it should not).

Whoever holds the broker URL can publish into the queue. The tasks themselves trust nothing but
the id they re-read from Postgres; this guard protects the worker around them. Celery's consumer
reads a message's headers and body in the worker's main process, and several shapes of garbage
(a body that is not ``[args, kwargs, embed]``, an unknown task name without an ``id`` header, an
unhashable task name, …) raise there, outside any handler: the worker logs "Unrecoverable error",
exits, and the message it had not acknowledged goes back to the queue for the next worker — one
message would stop the whole fleet, for good.

:class:`HostConsumer` (``worker_consumer``) checks each message with :func:`message_problem` and
rejects (drops, with a warning) anything that is not what ``services.dispatch`` and the reconcile
retry send: Celery protocol 2, a ``takohost.*`` task this worker knows, JSON
``[args: list, kwargs: dict, embed]`` with no callbacks, errbacks, chain or chord, no time limits,
and an ETA at most :data:`MAX_ETA_AHEAD` ahead. Whatever still raises while Celery handles an
accepted message drops that message instead of the worker.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Container

from celery.worker.consumer import Consumer

log = logging.getLogger(__name__)

#: Only this host's tasks run from the queue (not Celery's built-in ``celery.*`` canvas tasks).
HOST_TASK_PREFIX = "takohost."
#: The latest ETA a message may carry. Ours are a few seconds (the reconcile retry); a far-future
#: ETA would sit unacknowledged in a worker's memory and be redelivered after the broker's
#: visibility timeout, again and again.
MAX_ETA_AHEAD = dt.timedelta(minutes=5)
#: Headers whose value, when present, must be a string or null.
_TEXT_HEADERS = ("root_id", "parent_id", "group", "shadow", "expires", "eta")
#: Embedded canvas keys; our messages never carry any.
_CANVAS = ("callbacks", "errbacks", "chain", "chord")


def _eta_problem(eta: str, *, now: dt.datetime) -> str | None:
    try:
        when = dt.datetime.fromisoformat(eta)
    except ValueError:
        return "eta is not an ISO 8601 time"
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)  # enable_utc: Celery's naive times are UTC
    if when - now > MAX_ETA_AHEAD:
        return f"eta more than {int(MAX_ETA_AHEAD.total_seconds())} s ahead"
    return None


def message_problem(message: object, *, task_names: Container[str], now: dt.datetime) -> str | None:
    """Why ``message`` (a ``kombu.Message``) is not a task message of this host, or None when it is one.

    ``task_names`` are the registered task names; ``now`` is aware UTC. Decoding the body may
    raise (``kombu.exceptions.DecodeError``, ``ContentDisallowed`` for anything but JSON): the
    caller treats an exception as a problem too.
    """
    headers = getattr(message, "headers", None)
    if not isinstance(headers, dict):
        return "no headers"
    task = headers.get("task")
    if not isinstance(task, str):
        return "no task name header (not Celery protocol 2)"
    if not task.startswith(HOST_TASK_PREFIX) or task not in task_names:
        return f"task {task[:100]!r} is not a task of this host"
    if not isinstance(headers.get("id"), str) or not headers["id"]:
        return "no task id"
    for name in _TEXT_HEADERS:
        if headers.get(name) is not None and not isinstance(headers[name], str):
            return f"header {name} is not a string"
    if headers.get("timelimit") not in (None, [None, None], (None, None)):
        return "time limits are not accepted"
    retries = headers.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        return "retries is not a count"
    if headers.get("eta") is not None and (problem := _eta_problem(headers["eta"], now=now)):
        return problem
    if getattr(message, "content_type", None) != "application/json":
        return "body is not JSON"
    body = message.decode()  # type: ignore[attr-defined]
    if not isinstance(body, list | tuple) or len(body) != 3:
        return "body is not [args, kwargs, embed]"
    args, kwargs, embed = body
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        return "args is not a list or kwargs not an object"
    if embed is not None and not isinstance(embed, dict):
        return "embed is not an object"
    if any((embed or {}).get(key) for key in _CANVAS):
        return "callbacks, errbacks, chains and chords are not accepted"
    return None


class HostConsumer(Consumer):
    """Celery's worker consumer, with every task message checked by :func:`message_problem` first."""

    def create_task_handler(self, *args: object, **kwargs: object) -> Callable[[object], object]:
        """Celery's ``on_task_received``, wrapped: refused messages are rejected (dropped), and an
        error while Celery handles an accepted one drops that message, not the worker."""
        handler = super().create_task_handler(*args, **kwargs)
        passthrough = tuple(self.connection_errors) + tuple(self.channel_errors)

        def on_task_received(message: object) -> object:
            headers = getattr(message, "headers", None)
            task_id = headers.get("id") if isinstance(headers, dict) else None
            try:
                problem = message_problem(message, task_names=self.app.tasks, now=dt.datetime.now(dt.UTC))
            except passthrough:
                raise
            except Exception as exc:  # noqa: BLE001 - an undecodable body is a problem, not a crash
                problem = f"unreadable body ({exc.__class__.__name__})"
            if problem is not None:
                log.warning("task message refused: %s", problem, extra={"task_id": repr(task_id)[:100]})
                message.reject_log_error(log, passthrough)  # type: ignore[attr-defined]
                return None
            try:
                return handler(message)
            except passthrough:
                raise  # the consumer reconnects; the message is redelivered
            except Exception:
                log.exception("task message broke its handling; dropped", extra={"task_id": task_id})
                if not message.acknowledged:  # type: ignore[attr-defined]
                    message.reject_log_error(log, passthrough)  # type: ignore[attr-defined]
                return None

        return on_task_received
