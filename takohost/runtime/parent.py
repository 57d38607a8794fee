"""The parent's side of a replay context, where it is pure: how a child's step request, attempt
report and final message become decisions, outcomes, step records and the instance's error
(docs/spec/worker-forms.md#wf-abi, docs/spec/durable-workflow.md#dw-doc, docs/spec/durable-workflow.md#dw-replay "Class ABI、replay、step"; wire messages in ``PROTOCOL.md``).

The engine's replay context (``workers.engine.context``) and the in-process test kit
(``takohost.testing``) both answer a child with these functions and ``takohost.domain.decide``, so
a workflow behaves the same under either. Every message is untrusted and already shape-checked
(``protocol.check_child_message``); the values are re-validated here.

Standard library and ``takohost`` only; no I/O.
"""

from __future__ import annotations

import datetime as dt

from takohost.domain import decide, documents, identifiers, retry
from takohost.runtime import protocol, tracebacks

__all__ = [
    "ProtocolViolation",
    "attempt_outcome",
    "died_outcome",
    "errored_error",
    "output_problem",
    "record_after_attempt",
    "recorded_answer",
    "settled_answer",
    "run_failure",
    "step_request",
    "wait_timeout_message",
]

#: The error of an attempt whose process died while its effect ran.
PROCESS_DIED = {"type": "ProcessDied", "message": "the process running the effect died"}


class ProtocolViolation(Exception):
    """The child broke the protocol (the instance ends ``run_threw``)."""


def step_request(message: dict) -> decide.Request:
    """The :class:`decide.Request` of a ``do``/``sleep``/``wait`` message (its arguments validated
    again by the domain validators). Raises :class:`ProtocolViolation` for arguments the child
    should have refused itself."""
    kind, name = message["op"], message["name"]
    if "argsError" in message:
        return decide.Request(kind=kind, name=name, args_error=message["argsError"])
    try:
        if kind == "do":
            return decide.Request(kind=kind, name=name, policy=retry.parse_retry_policy(message["policy"]))
        if kind == "sleep":
            return decide.Request(kind=kind, name=name, seconds=identifiers.validate_sleep_seconds(message["seconds"]))
        return decide.Request(
            kind=kind,
            name=name,
            event_type=message["type"],
            timeout_seconds=identifiers.validate_timeout_seconds(message["timeoutSeconds"]),
        )
    except TypeError as exc:  # the child validated these: it is lying
        raise ProtocolViolation(f"invalid {kind} arguments: {exc}") from None


def recorded_answer(decision: decide.Decision) -> dict | None:
    """The frame that answers a step request from the record alone: ``{"op": "resolve",
    "result"}`` for a completed step, ``{"op": "raise", "error", "message"}`` for a failed one,
    ``{"op": "reject_args"}`` for bad arguments of an uncompleted name (``PROTOCOL.md``);
    ``None`` for every decision that needs the caller to act (run an effect, sleep, wait, end
    the instance)."""
    if isinstance(decision, decide.Resolve):
        return {"op": "resolve", "result": decision.result}
    if isinstance(decision, decide.Raise):
        return {"op": "raise", "error": decision.error, "message": decision.message}
    if isinstance(decision, decide.RejectArgs):
        return {"op": "reject_args"}
    return None


def attempt_outcome(message: dict, *, decision: decide.RunEffect, now: dt.datetime) -> decide.Outcome:
    """The outcome of an attempt from the child's ``effect_result``: the result is validated as a
    document here too (docs/spec/durable-workflow.md#dw-doc: a non-document is a failed attempt, ``InvalidDocument`` /
    ``DocumentTooLarge``); a failure's ``traceback`` is re-checked (``tracebacks.clean_frames``)
    and kept for the history."""
    ok, result, error = message["ok"], message.get("result"), message.get("error")
    if not ok and error is not None:
        error = {"type": error["type"], "message": error["message"]}
        frames = tracebacks.clean_frames(message["error"].get("traceback"))
        if frames:
            error["traceback"] = frames
    if ok:
        try:
            documents.canonical_document(result, allow_none=True)
        except documents.InvalidDocument as exc:
            ok, error = False, {"type": "InvalidDocument", "message": str(exc)}
        except documents.DocumentTooLargeError as exc:
            ok, error = False, {"type": "DocumentTooLarge", "message": str(exc)}
    return decide.decide_outcome(
        attempt=decision.attempt, policy=decision.policy, ok=ok, result=result if ok else None, error=error, now=now
    )


def died_outcome(decision: decide.RunEffect, *, now: dt.datetime) -> decide.Outcome:
    """The outcome of an attempt whose process died while the effect ran (a failed attempt)."""
    return decide.decide_outcome(
        attempt=decision.attempt, policy=decision.policy, ok=False, now=now, error=dict(PROCESS_DIED)
    )


def record_after_attempt(
    name: str, *, decision: decide.RunEffect, outcome: decide.AttemptSucceeded | decide.AttemptFailedFinal
) -> decide.StepRecord:
    """The step record the rest of the context replays after an attempt settled the step."""
    if isinstance(outcome, decide.AttemptSucceeded):
        return decide.StepRecord(name=name, kind="do", state="succeeded", attempts=decision.attempt, result=outcome.result)
    return decide.StepRecord(
        name=name, kind="do", state="failed", attempts=decision.attempt, error={"message": outcome.message}
    )


def settled_answer(outcome: decide.AttemptSucceeded | decide.AttemptFailedFinal) -> dict:
    """The frame that answers the child after an attempt settled its step: ``{"op": "resolve",
    "result"}`` for a success, ``{"op": "raise", "error": "step_failed", "message"}`` for the final
    failure (``PROTOCOL.md``; the same frame a later context replays from
    :func:`record_after_attempt`'s record)."""
    if isinstance(outcome, decide.AttemptSucceeded):
        return {"op": "resolve", "result": outcome.result}
    return {"op": "raise", "error": "step_failed", "message": outcome.message}


def wait_timeout_message(decision: decide.TryWait) -> str:
    """The ``wait_timeout`` message a wait that timed out in this context raises (the one its
    step row keeps: ``decide.wait_timeout_message``)."""
    return decide.wait_timeout_message(decision.event_type, decision.timeout_seconds)


def run_failure(message: dict, steps: dict[str, decide.StepRecord]) -> tuple[str, str]:
    """``(reason, message)`` of a ``run_failed``: ``step_failed`` only when its ``step`` names a
    ``do`` step recorded as failed (the child is untrusted, PROTOCOL.md); else ``run_threw``."""
    if message["reason"] == "step_failed":
        record = steps.get(message.get("step", ""))
        if record is None or record.kind != "do" or record.state != "failed":
            text = f"the workflow process reported step_failed for a step that did not fail: {message['message']}"
            return "run_threw", text
    return message["reason"], message["message"]


def output_problem(output: object) -> str | None:
    """Why ``run``'s return value cannot be the instance's output (``None``: it can)."""
    try:
        documents.canonical_document(output, allow_none=True)
    except (documents.InvalidDocument, documents.DocumentTooLargeError) as exc:
        return f"run returned a value that is not a document: {exc}"
    return None


def errored_error(reason: str, message: str) -> dict:
    """The instance's ``error`` of an ``errored`` end: ``{"reason", "message"?}`` (the spec's shape, docs/spec/durable-workflow.md#dw-status)."""
    error = {"reason": reason}
    if message:
        error["message"] = protocol.safe_text(message)
    return error
