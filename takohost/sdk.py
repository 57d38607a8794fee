"""Types of the tenant SDK: what workflow code and ``scheduled`` handlers receive, for an editor's
completion and a type checker (the package ships ``py.typed``).

Nothing here changes what the host passes at run time; these are descriptions of it
(docs/spec/worker-forms.md#wf-abi):

- :class:`Step` is ``step`` of a plain ``run(self, event, step)``, :class:`AsyncStep` of an
  ``async def run`` (docs/spec/durable-workflow.md#dw-step);
- :class:`RetryPolicy` and :class:`WaitOptions` are the settings of ``step.do`` and
  ``step.wait_for_event`` (docs/spec/durable-workflow.md#dw-step-do, #dw-step-wait);
- :class:`Env` is ``env`` (the Version's vars and workflow bindings), :class:`WorkflowBinding` and
  :class:`WorkflowInstance` what a binding offers (docs/spec/durable-workflow.md#dw-binding);
- :class:`WorkflowEvent` is ``run``'s ``event``; :class:`ScheduledEvent` and :class:`ScheduledContext`
  are the ``event`` and ``ctx`` of ``scheduled(event, env, ctx)`` (docs/spec/cron-trigger.md#cr-handler);
- the host errors are re-exported from :mod:`takohost.errors` (docs/spec/worker-forms.md#wf-errors).

Usage::

    from takohost import sdk

    class ReportWorkflow:
        def __init__(self, env: sdk.Env) -> None:
            self.env = env

        def run(self, event: sdk.WorkflowEvent, step: sdk.Step) -> sdk.Document | None:
            policy: sdk.RetryPolicy = {"maxAttempts": 3, "backoff": "exponential"}
            user = step.do("load user", lambda: {"id": 1}, policy)
            step.sleep("cool off", 60)
            ok = step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 3600})
            return {"user": user, "approved": ok}

The classes are ``typing.Protocol``\\ s marked ``runtime_checkable``: ``isinstance(step, sdk.Step)``
holds for the host's ``step``. This module imports only the standard library (it is importable in
the sandbox: docs/spec/host-limits.md#hl-files).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, NotRequired, Protocol, TypeAlias, TypedDict, runtime_checkable

from takohost.errors import (
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
)

__all__ = [
    "AsyncStep",
    "BackendUnavailable",
    "Backoff",
    "Document",
    "DocumentTooLarge",
    "Effect",
    "Env",
    "EventQueueFull",
    "FailureReason",
    "HostError",
    "InstanceError",
    "InstanceExists",
    "InstanceStatus",
    "InstanceTerminal",
    "InvalidParams",
    "RetryPolicy",
    "ScheduledContext",
    "ScheduledEvent",
    "Status",
    "Step",
    "StepFailed",
    "UnknownInstance",
    "WaitOptions",
    "WaitTimeout",
    "WorkflowBinding",
    "WorkflowEvent",
    "WorkflowInstance",
]

#: A document (docs/spec/durable-workflow.md#dw-doc): a ``dict`` with ``str`` keys whose values are
#: ``None``, ``bool``, ``int`` within ±(2^53−1), finite ``float``, ``str``, ``list`` or such a ``dict``;
#: at most 1024 keys per object, at most 1 MiB in its canonical form.
Document: TypeAlias = dict[str, Any]

#: ``RetryPolicy.backoff``.
Backoff: TypeAlias = Literal["constant", "exponential"]

#: The seven instance statuses (docs/spec/durable-workflow.md#dw-status).
Status: TypeAlias = Literal["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]

#: Why an instance ended ``errored`` (docs/spec/durable-workflow.md#dw-status).
FailureReason: TypeAlias = Literal[
    "run_threw", "step_failed", "step_limit_exceeded", "lifetime_exceeded", "step_definition_mismatch"
]

#: The effect of ``step.do``: a callable of no arguments returning a document or ``None`` (in an
#: ``async def run`` it may also return an awaitable of one).
Effect: TypeAlias = Callable[[], "Document | None | Awaitable[Document | None]"]


class RetryPolicy(TypedDict):
    """``step.do``'s third argument (docs/spec/durable-workflow.md#dw-step-do). Omitting the policy
    means one attempt. Inside it ``maxAttempts`` is required; wrong types or out-of-range values
    raise ``TypeError`` in the workflow."""

    #: attempts in all (not retries), 1..100
    maxAttempts: int
    #: seconds before the second attempt, 0..43200 (default 0)
    initialDelaySeconds: NotRequired[int]
    #: ``"constant"`` (default) or ``"exponential"`` (the delay doubles after each failed attempt)
    backoff: NotRequired[Backoff]
    #: cap on any delay, seconds 0..43200 (default 43200)
    maxDelaySeconds: NotRequired[int]


class WaitOptions(TypedDict):
    """``step.wait_for_event``'s second argument (docs/spec/durable-workflow.md#dw-step-wait)."""

    #: the event type to wait for (1..256 Unicode scalar values)
    type: str
    #: seconds, 1..31536000; past it the wait raises ``WaitTimeout``
    timeoutSeconds: int


class WorkflowEvent(TypedDict):
    """``run``'s ``event``: the instance id and its params (absent when created without)."""

    instanceId: str
    params: NotRequired[Document]


class InstanceError(TypedDict):
    """``error`` of an ``errored`` instance's status."""

    reason: FailureReason
    message: NotRequired[str]


class InstanceStatus(TypedDict):
    """What ``WorkflowInstance.status()`` returns: ``output`` only when ``complete``, ``error`` only
    when ``errored``."""

    status: Status
    output: NotRequired[Document]
    error: NotRequired[InstanceError]


class ScheduledEvent(TypedDict):
    """``event`` of ``scheduled(event, env, ctx)`` (docs/spec/cron-trigger.md#cr-handler)."""

    #: the Trigger's cron string that matched
    cron: str
    #: the match's time, UTC epoch milliseconds
    scheduledTime: int


@runtime_checkable
class Step(Protocol):
    """``step`` of a plain ``run``: every method blocks and returns the value
    (docs/spec/durable-workflow.md#dw-step). Names are 1..256 Unicode scalar values; a completed
    name replays its recorded result without running anything again."""

    def do(self, name: str, effect: Effect, retry_policy: RetryPolicy | None = None) -> Document | None:
        """Run ``effect`` durably once; its document or ``None``. Raises ``StepFailed`` when the
        policy is exhausted, ``TypeError`` for bad arguments of an uncompleted name."""
        ...

    def sleep(self, name: str, seconds: int) -> None:
        """Sleep ``seconds`` (0..31536000); a future sleep ends this context, a later one returns."""
        ...

    def wait_for_event(self, name: str, options: WaitOptions) -> Document | None:
        """The oldest matching event's payload (``None`` when it has none); ``WaitTimeout`` after
        ``timeoutSeconds``."""
        ...


@runtime_checkable
class AsyncStep(Protocol):
    """``step`` of an ``async def run``: the same methods, returning awaitables. Overlapping steps
    (e.g. ``asyncio.gather`` of two) end the instance ``step_definition_mismatch``."""

    def do(
        self, name: str, effect: Effect, retry_policy: RetryPolicy | None = None
    ) -> Awaitable[Document | None]:
        """Awaitable of :meth:`Step.do`'s result."""
        ...

    def sleep(self, name: str, seconds: int) -> Awaitable[None]:
        """Awaitable of :meth:`Step.sleep`."""
        ...

    def wait_for_event(self, name: str, options: WaitOptions) -> Awaitable[Document | None]:
        """Awaitable of :meth:`Step.wait_for_event`'s result."""
        ...


@runtime_checkable
class WorkflowInstance(Protocol):
    """One instance reached through a binding (docs/spec/durable-workflow.md#dw-binding)."""

    @property
    def id(self) -> str:
        """The instance id."""
        ...

    def status(self) -> InstanceStatus:
        """Its status now; ``UnknownInstance`` once purged."""
        ...

    def send_event(self, type: str, payload: Document | None = None) -> None:  # noqa: A002
        """Queue an event durably (``InstanceTerminal``, ``EventQueueFull``, ``UnknownInstance``)."""
        ...

    def terminate(self) -> None:
        """Stop it for good; returns once the stop is proven (``BackendUnavailable`` otherwise)."""
        ...


@runtime_checkable
class WorkflowBinding(Protocol):
    """``env.NAME`` for a ``workflowBindings`` entry (docs/spec/durable-workflow.md#dw-binding)."""

    def create(self, id: str | None = None, params: Document | None = None) -> WorkflowInstance:  # noqa: A002
        """A new instance (``InstanceExists`` for a retained id, ``InvalidParams``,
        ``DocumentTooLarge``); the host picks an id when ``id`` is ``None``."""
        ...

    def get(self, id: str) -> WorkflowInstance:  # noqa: A002
        """The instance ``id`` (``UnknownInstance`` when there is none)."""
        ...


class Env(Protocol):
    """``env``: one attribute per Version var (a deep copy of its JSON value) and per workflow
    binding (a :class:`WorkflowBinding`), nothing else (docs/spec/worker-forms.md#wf-env). A type
    checker cannot know a Version's names, so every attribute reads as ``Any``; annotate a
    binding where it is used: ``orders: sdk.WorkflowBinding = env.ORDERS``."""

    def __getattr__(self, name: str) -> Any: ...


@runtime_checkable
class ScheduledContext(Protocol):
    """``ctx`` of ``scheduled(event, env, ctx)`` (docs/spec/cron-trigger.md#cr-handler)."""

    def wait_until(self, work: Awaitable[Any] | Callable[[], Any]) -> None:
        """Keep the delivery open until ``work`` (an awaitable, or a callable run after the handler
        returns) finishes; its failure fails the delivery. ``TypeError`` for anything else."""
        ...
