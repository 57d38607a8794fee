"""Host log lines that name what they are about (docs/spec/host-features.md#hf-observability).

A replay context binds the fields of its instance — ``workflow`` (the DurableWorkflow UID), ``space``,
``instance_id`` (the user's id), ``instance`` (the host's pk) and ``epoch`` (the context's fencing
token) — for the thread that runs it (:func:`bound`, :func:`bind`, contextvars), and remembers them
by pk (:func:`remember_instance`) so that lines other threads log about that pk (the heartbeat's
``extra={"instance": pk}``) carry them too. :class:`FieldsFilter`, on the handler :func:`setup`
installs, copies those fields onto every record that does not have them already; an ``extra=``
given at the call wins. Cron deliveries bind ``trigger``, ``space`` and ``scheduled_time``.

Two renderings: ``text`` (``TIME LEVEL LOGGER MESSAGE key=value …``, the default) and ``json``
(one object per line: ``time``, ``level``, ``logger``, ``message``, every field, ``exception``),
chosen by ``--log-format`` of ``takohost api|worker|beat`` or ``TAKOHOST_LOG_FORMAT``.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

#: The fields that name an instance, in the order the text format prints them first.
INSTANCE_FIELDS = ("workflow", "space", "instance_id", "instance", "epoch")
#: ``TAKOHOST_LOG_FORMAT`` / ``--log-format`` values.
FORMATS = ("text", "json")

_EMPTY: Mapping[str, Any] = {}
_current: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("takohost_log_fields", default=_EMPTY)
#: instance pk → its fields, for lines logged about it by other threads of this process.
_by_pk: dict[int, Mapping[str, Any]] = {}

#: Attributes every ``LogRecord`` has; anything else on a record is a field (an ``extra=``).
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def current() -> Mapping[str, Any]:
    """The fields bound for this thread (or task) now; read-only."""
    return _current.get()


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Bind ``fields`` (``None`` values are dropped) for the lines logged inside the block, on top
    of the fields bound already; restored on exit."""
    token = _current.set({**_current.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _current.reset(token)


def bind(**fields: Any) -> None:
    """Add ``fields`` to the innermost :func:`bound` block (e.g. the ``epoch`` once it is taken);
    outside any block they stay until the thread's context ends."""
    _current.set({**_current.get(), **{k: v for k, v in fields.items() if v is not None}})


def remember_instance(pk: int, fields: Mapping[str, Any]) -> None:
    """Lines about instance ``pk`` (``extra={"instance": pk}``) from any thread carry ``fields``
    until :func:`forget_instance`."""
    _by_pk[pk] = dict(fields)


def forget_instance(pk: int) -> None:
    """Undo :func:`remember_instance`."""
    _by_pk.pop(pk, None)


class FieldsFilter(logging.Filter):
    """Copies the bound fields (and those remembered for the record's ``instance`` pk) onto every
    record that lacks them; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging's API
        fields = _current.get()
        named = record.__dict__.get("instance")
        if isinstance(named, int) and named != fields.get("instance"):
            # A line about another instance than this thread's: its own remembered fields only.
            fields = {k: v for k, v in fields.items() if k not in INSTANCE_FIELDS}
            fields.update(_by_pk.get(named, _EMPTY))
        for key, value in fields.items():
            if key not in record.__dict__:
                setattr(record, key, value)
        return True


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's fields (its ``extra=`` and the bound ones), instance fields first."""
    extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
    ordered = {k: extra.pop(k) for k in INSTANCE_FIELDS if k in extra}
    ordered.update(sorted(extra.items()))
    return ordered


def _text_value(value: Any) -> str:
    """A string as is (JSON-quoted when empty or holding spaces, quotes or ``=``); anything else
    as compact JSON."""
    if not isinstance(value, str):
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    if value == "" or any(c.isspace() or c in '"=' for c in value):
        return json.dumps(value, ensure_ascii=False)
    return value


class TextFormatter(logging.Formatter):
    """``2026-12-01 16:00:00,123 INFO workers.engine.context context done workflow=… epoch=3``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:  # noqa: A003 - logging's API
        text = super().format(record)
        fields = record_fields(record)
        if record.name.startswith("celery"):
            fields.pop("data", None)  # Celery's own message already says what its ``data`` holds
        if not fields:
            return text
        head, sep, tail = text.partition("\n")  # fields on the message line, before a traceback
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        return f"{head} {pairs}{sep}{tail}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``{"time" (RFC 3339 UTC), "level", "logger", "message", fields…,
    "exception"?}``; values JSON cannot hold are written as their ``str``."""

    def format(self, record: logging.LogRecord) -> str:  # noqa: A003 - logging's API
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        body: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            body.setdefault(key, value)
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            body["exception"] = record.exc_text
        return json.dumps(body, default=str, ensure_ascii=False)


def log_format(value: str | None = None) -> str:
    """The log format to use: ``value`` (a ``--log-format``), else ``TAKOHOST_LOG_FORMAT``, else
    ``text``. Raises ``ValueError`` for anything but :data:`FORMATS`."""
    chosen = (value or os.environ.get("TAKOHOST_LOG_FORMAT") or "text").strip().lower()
    if chosen not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {chosen!r}")
    return chosen


def setup(*, fmt: str | None = None, level: int | str = logging.INFO) -> str:
    """Make the root logger write to stderr in format ``fmt`` (see :func:`log_format`) with the
    fields filter; replaces the root's handlers. Exports ``TAKOHOST_LOG_FORMAT`` so that processes
    this one starts (gunicorn and pool workers inherit the handler; solo processes read it) agree.
    Returns the format used."""
    chosen = log_format(fmt)
    os.environ["TAKOHOST_LOG_FORMAT"] = chosen
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    handler.addFilter(FieldsFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return chosen
