"""``env`` and the workflow bindings as user code sees them inside the sandbox (docs/spec/worker-forms.md#wf-loading, docs/spec/durable-workflow.md#dw-binding).

``env`` carries exactly the Version's ``vars`` (attributes holding deep copies) and one
``WorkflowBinding`` per ``workflowBindings[].name``; nothing else (docs/spec/durable-workflow.md: "envはそのVersionの
宣言済み環境のみで、管理controlは入れない").

A binding call validates its arguments here, before any side effect (docs/spec/host-limits.md#hl-decisions: bad id or event
type → ``TypeError``; bad params/payload → ``InvalidParams`` / ``DocumentTooLarge``), then sends
one ``binding`` request to the parent and turns the answer into a value or the SDK error named by
the parent (``takohost.errors.error_from_name``). Standard library and ``takohost`` only.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

from takohost import errors
from takohost.domain import documents, identifiers

__all__ = [
    "TYPE_ERROR_NAME",
    "Env",
    "Requester",
    "WorkflowBinding",
    "WorkflowInstance",
    "check_document_argument",
    "make_env",
]

#: The ``binding_error`` name the parent sends when the host found the arguments invalid
#: (HTTP ``invalid_request``); the caller gets a ``TypeError`` (docs/spec/host-limits.md#hl-decisions), not an SDK error.
TYPE_ERROR_NAME = "invalid_request"


class Requester(Protocol):
    """The child's channel as bindings use it: one request, one answer (``child.channel.Channel``)."""

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` and return the parent's next answer."""
        ...

    def fatal(self, message: str) -> None:
        """The parent broke the protocol: stop the child now (never returns)."""
        ...


class Env:
    """The ``env`` object: attributes are the Version's vars and bindings, nothing else."""

    def __init__(self, attributes: dict[str, Any]) -> None:
        for key, value in attributes.items():
            object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return f"Env({', '.join(sorted(vars(self)))})"


def make_env(*, variables: dict[str, Any], bindings: list[str], channel: Requester) -> Env:
    """Build ``env`` from the job: ``variables`` (name → JSON value) and binding names.

    Every var value is deep-copied, so user code mutating ``env.NAME`` changes nothing shared.
    """
    attributes: dict[str, Any] = {name: copy.deepcopy(value) for name, value in variables.items()}
    for name in bindings:
        attributes[name] = WorkflowBinding(name, channel)
    return Env(attributes)


def check_document_argument(value: object, *, what: str) -> None:
    """Raise ``InvalidParams`` / ``DocumentTooLarge`` unless ``value`` is a document or ``None``
    (docs/spec/durable-workflow.md#dw-doc; ``what`` names the argument in the message: ``"params"``,
    ``"payload"``). The test kit (``takohost.testing``) checks its ``params`` and payloads with it too."""
    try:
        documents.canonical_document(value, allow_none=True)
    except documents.InvalidDocument as exc:
        raise errors.InvalidParams(f"{what} is not a document: {exc}") from None
    except documents.DocumentTooLargeError as exc:
        raise errors.DocumentTooLarge(f"{what}: {exc}") from None


class WorkflowBinding:
    """``env.NAME`` for a ``workflowBindings`` entry: ``create`` and ``get`` (docs/spec/durable-workflow.md#dw-binding)."""

    __slots__ = ("_channel", "_name")

    def __init__(self, name: str, channel: Requester) -> None:
        self._name = name
        self._channel = channel

    def __repr__(self) -> str:
        return f"WorkflowBinding({self._name!r})"

    def create(self, id: str | None = None, params: dict[str, Any] | None = None) -> WorkflowInstance:  # noqa: A002
        """Create an instance (``id`` issued by the host when ``None``) and return it.

        Raises ``TypeError`` for a bad id, ``InvalidParams`` / ``DocumentTooLarge`` for bad params,
        and the host's answer as an SDK error (``InstanceExists``, ``BackendUnavailable``, …).
        """
        args: dict[str, Any] = {}
        if id is not None:
            args["id"] = identifiers.validate_scalar_string(id, what="instance id")
        if params is not None:
            check_document_argument(params, what="params")
            args["params"] = params
        value = _call(self._channel, binding=self._name, call="create", args=args)
        return WorkflowInstance(self._name, _instance_id(value, self._channel), self._channel)

    def get(self, id: str) -> WorkflowInstance:  # noqa: A002
        """Return the instance ``id``; ``TypeError`` for a bad id, ``UnknownInstance`` if none."""
        instance_id = identifiers.validate_scalar_string(id, what="instance id")
        value = _call(self._channel, binding=self._name, call="get", args={"id": instance_id})
        return WorkflowInstance(self._name, _instance_id(value, self._channel), self._channel)


class WorkflowInstance:
    """A handle on one instance: ``id``, ``status()``, ``send_event()``, ``terminate()``."""

    __slots__ = ("_binding", "_channel", "_id")

    def __init__(self, binding: str, instance_id: str, channel: Requester) -> None:
        self._binding = binding
        self._id = instance_id
        self._channel = channel

    @property
    def id(self) -> str:
        """The instance id (1..256 Unicode scalar values)."""
        return self._id

    def __repr__(self) -> str:
        return f"WorkflowInstance({self._binding!r}, {self._id!r})"

    def status(self) -> dict[str, Any]:
        """``{"status", "output"?, "error"?: {"reason", "message"?}}`` as the host reports it."""
        value = _call(self._channel, binding=self._binding, call="status", args={"id": self._id})
        if type(value) is not dict:
            self._channel.fatal("binding_result of status must be an object")
        return value

    def send_event(self, type: str, payload: dict[str, Any] | None = None) -> None:  # noqa: A002
        """Queue an event; ``TypeError`` for a bad type, ``InvalidParams``/``DocumentTooLarge`` for a
        bad payload, SDK errors from the host (``InstanceTerminal``, ``EventQueueFull``, …)."""
        args: dict[str, Any] = {
            "id": self._id,
            "type": identifiers.validate_scalar_string(type, what="event type"),
        }
        if payload is not None:
            check_document_argument(payload, what="payload")
            args["payload"] = payload
        _call(self._channel, binding=self._binding, call="send_event", args=args)

    def terminate(self) -> None:
        """Terminate the instance (returns once the host proved the stop; SDK errors otherwise)."""
        _call(self._channel, binding=self._binding, call="terminate", args={"id": self._id})


def _call(channel: Requester, *, binding: str, call: str, args: dict[str, Any]) -> Any:
    """One ``binding`` round trip; returns ``value`` or raises the SDK error the parent names."""
    reply = channel.request({"op": "binding", "binding": binding, "call": call, "args": args})
    op = reply.get("op")
    if op == "binding_result":
        return reply.get("value")
    if op == "binding_error":
        name, message = reply.get("name"), reply.get("message")
        message = message if type(message) is str else ""
        if name == TYPE_ERROR_NAME:
            raise TypeError(message)
        try:
            error = errors.error_from_name(name, message)  # type: ignore[arg-type]
        except ValueError:
            error = errors.BackendUnavailable(f"host answered with an unknown error: {message}")
        raise error
    channel.fatal(f"unexpected answer {op!r} to a binding call")
    raise AssertionError("unreachable")


def _instance_id(value: object, channel: Requester) -> str:
    if type(value) is not dict or type(value.get("id")) is not str:
        channel.fatal('binding_result of create/get must be {"id": string}')
    return value["id"]  # type: ignore[index]
