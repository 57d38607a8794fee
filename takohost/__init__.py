"""takohost: a durable-workflow and cron host.

The package root exports the host errors that workflow code imports (``from takohost import
StepFailed``); it must stay importable with the standard library alone (docs/spec/worker-forms.md#wf-errors).
"""

from __future__ import annotations

from takohost.errors import (
    ERROR_CLASSES,
    BackendUnavailable,
    DocumentTooLarge,
    EventQueueFull,
    HostError,
    InstanceExists,
    InstanceTerminal,
    InvalidParams,
    StepFailed,
    UnknownInstance,
    WaitTimeout,
    error_from_name,
)

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
