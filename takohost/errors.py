"""The host errors that workflow code and binding callers see (docs/spec/worker-forms.md#wf-errors, docs/spec/durable-workflow.md).

A step's host error carries its exact snake_case name as a read-only attribute
(docs/spec/durable-workflow.md#dw-errors). In Python every instance carries ``.name``, exactly that snake_case
string, as a **read-only** attribute: it is a class-level ``property`` without setter or deleter, so
``e.name = "x"`` and ``del e.name`` raise ``AttributeError`` (a data descriptor also wins over the instance
``__dict__``). ``.message`` is the human text (also ``str(e)``).

Whether an uncaught error counts as the genuine ``step_failed`` is decided by the host from the
**identity** of the objects it raised in the current context, never from ``.name``: a user-built
``StepFailed`` or any copy of the name is ``run_threw``.

This module imports only the standard library: user code in the sandbox does
``from takohost import StepFailed``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ERROR_CLASSES",
    "BackendUnavailable",
    "DocumentTooLarge",
    "EventQueueFull",
    "HostError",
    "InstanceExists",
    "InstanceTerminal",
    "InvalidParams",
    "StepFailed",
    "UnknownInstance",
    "WaitTimeout",
    "error_from_name",
]


class HostError(Exception):
    """Root of the host errors; never raised itself (instantiating it raises ``TypeError``).

    ``args`` is ``(message,)`` so that ``pickle`` round-trips every subclass.
    """

    error_name: ClassVar[str] = ""

    def __init__(self, message: str = "") -> None:
        if type(self) is HostError:
            raise TypeError("HostError is abstract; raise one of its subclasses")
        super().__init__(message)
        self.message = message

    @property
    def name(self) -> str:
        """The exact snake_case error name (docs/spec/durable-workflow.md#dw-errors), e.g. ``"step_failed"`` (read-only)."""
        return type(self).error_name

    def __str__(self) -> str:
        return str(self.message)


class StepFailed(HostError):
    """A ``step.do`` exhausted its retry policy (docs/spec/durable-workflow.md#dw-step-do: "最終失敗はstep_failedを記録する")."""

    error_name = "step_failed"


class WaitTimeout(HostError):
    """A ``step.wait_for_event`` reached its timeout without a matching event."""

    error_name = "wait_timeout"


class InstanceExists(HostError):
    """``create`` with an id that is still retained (HTTP ``409 instance_exists``)."""

    error_name = "instance_exists"


class UnknownInstance(HostError):
    """``get``/``send_event``/``terminate`` on an unknown or purged id (HTTP 404)."""

    error_name = "unknown_instance"


class InvalidParams(HostError):
    """params or an event payload is not a document (docs/spec/durable-workflow.md#dw-doc, HTTP 400)."""

    error_name = "invalid_params"


class DocumentTooLarge(HostError):
    """A document's RFC 8785 form exceeds 1 048 576 bytes (docs/spec/durable-workflow.md#dw-doc, HTTP 413)."""

    error_name = "document_too_large"


class InstanceTerminal(HostError):
    """``send_event`` to an instance that already reached a terminal status (HTTP 409)."""

    error_name = "instance_terminal"


class EventQueueFull(HostError):
    """The instance's unconsumed events exceed 1024 or 1 048 576 bytes (HTTP 429)."""

    error_name = "event_queue_full"


class BackendUnavailable(HostError):
    """A caller operation could not reach the backend or prove a stop in time (HTTP 503)."""

    error_name = "backend_unavailable"


ERROR_CLASSES: dict[str, type[HostError]] = {
    cls.error_name: cls
    for cls in (
        StepFailed,
        WaitTimeout,
        InstanceExists,
        UnknownInstance,
        InvalidParams,
        DocumentTooLarge,
        InstanceTerminal,
        EventQueueFull,
        BackendUnavailable,
    )
}


def error_from_name(name: str, message: str = "") -> HostError:
    """Build the host error whose snake_case name (docs/spec/durable-workflow.md#dw-errors) is ``name`` (e.g. across a process boundary).

    Raises ``ValueError`` for a name that is not one of ``ERROR_CLASSES``.
    """
    if type(name) is not str:
        raise ValueError(f"host error name must be a str, not {type(name).__name__}")
    cls = ERROR_CLASSES.get(name)
    if cls is None:
        raise ValueError(f"unknown host error name: {name!r}")
    return cls(message)
