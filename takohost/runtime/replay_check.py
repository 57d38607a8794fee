"""Replay a recorded history against a workflow's code and find the first divergence (docs/spec/host-features.md#hf-testing;
docs/testing.md "Replaying a history"; Temporal's ``Replayer`` is the model).

The history's events (the HTTP history: results, params, policies, sleep seconds and wait
timeouts joined in) are turned back into the step records replay reads (:func:`steps_of`). A
:class:`Replay` then answers a child running the candidate (the sandbox's ``workflow`` job, or the
test kit's thread): every step it asks for is compared, in order, with the steps the history
recorded (by their first record), and answered from the record with the host's own decision
(``decide``: a completed name replays its result or failure). The first step that differs —
another name, another kind, or (for a step the history left unfinished, whose first settings the
host would keep) other settings — is the divergence. Replay stops, compatible, at the first step
without a recorded result (no effect runs, no event is read); a run that ends early, or with
another output than the recorded one, diverges.

Used by ``takohost.testing.replay`` (in process) and ``workers.version_check`` (in the sandbox).
Standard library and ``takohost`` only; no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any, Protocol

from takohost.domain import decide, retry
from takohost.runtime import parent, protocol

__all__ = ["CandidateFailed", "Child", "Divergence", "RecordedStep", "Replay", "ReplayResult", "steps_of"]

_TERMINAL = ("complete", "errored", "terminated")


class CandidateFailed(RuntimeError):
    """The candidate could not be replayed at all: its main module did not import, or its class
    could not be constructed (the message says which, with the error)."""


@dataclasses.dataclass(frozen=True)
class RecordedStep:
    """A step as the history records it: ``settings`` ``{"policy"}`` (do), ``{"seconds"}``
    (sleep), ``{"type", "timeoutSeconds"}`` (wait) — ``None`` when the history predates them."""

    name: str
    kind: str
    settings: dict | None
    record: decide.StepRecord

    def describe(self) -> dict:
        """``{"name", "kind", "settings"?, "state"}``."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "state": self.record.state}
        if self.settings is not None:
            out["settings"] = self.settings
        return out


def _when(text: object) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None


def steps_of(events: list[dict]) -> list[RecordedStep]:
    """Rebuild the step records from the history's events (the step rows, as far as replay reads them)."""
    order: list[str] = []
    kinds: dict[str, str] = {}
    settings: dict[str, dict | None] = {}
    fields: dict[str, dict[str, Any]] = {}

    def touch(name: str, kind: str) -> dict[str, Any]:
        if name not in fields:
            order.append(name)
            kinds[name] = kind
            settings[name] = None
            fields[name] = {"state": "pending", "attempts": 0}
        return fields[name]

    for event in events:
        kind_of_event, attributes = event.get("eventType"), event.get("attributes") or {}
        name = attributes.get("name")
        if not isinstance(name, str):
            continue
        if kind_of_event == "StepAttemptStarted":
            row = touch(name, "do")
            if settings[name] is None and isinstance(attributes.get("policy"), dict):
                settings[name] = {"policy": attributes["policy"]}
                row["config"] = {"policy": attributes["policy"]}
        elif kind_of_event == "StepAttemptFailed":
            row = touch(name, "do")
            row["attempts"] = max(row["attempts"], int(attributes.get("attempt", 0)))
        elif kind_of_event == "StepFailed":
            row = touch(name, "do")
            row.update(state="failed", attempts=attributes.get("attempts", 0), error={"message": attributes.get("message", "")})
        elif kind_of_event == "SleepScheduled":
            row = touch(name, "sleep")
            row["wake_at"] = _when(attributes.get("wakeAt"))
            if "seconds" in attributes:
                settings[name] = {"seconds": attributes["seconds"]}
                row["config"] = {"seconds": attributes["seconds"]}
        elif kind_of_event == "SleepCompleted":
            touch(name, "sleep")["state"] = "succeeded"
        elif kind_of_event == "WaitStarted":
            row = touch(name, "wait")
            row["timeout_at"] = _when(attributes.get("timeoutAt"))
            started = _when(event.get("eventTimestamp"))
            seconds = attributes.get("timeoutSeconds")
            if seconds is None and row["timeout_at"] is not None and started is not None:
                seconds = round((row["timeout_at"] - started).total_seconds())  # a history before timeoutSeconds
            row["config"] = {"type": attributes.get("type"), "timeoutSeconds": seconds}
            if "timeoutSeconds" in attributes:
                settings[name] = {"type": attributes.get("type"), "timeoutSeconds": attributes["timeoutSeconds"]}
        elif kind_of_event == "WaitTimedOut":
            row = touch(name, "wait")
            config = row.get("config") or {}
            message = decide.wait_timeout_message(config.get("type", ""), config.get("timeoutSeconds", 0))
            row.update(state="failed", error={"message": message})
        elif kind_of_event == "StepCompleted":
            row = touch(name, attributes.get("kind", "do"))
            row.update(state="succeeded", result=attributes.get("result"))
            if "attempt" in attributes:
                row["attempts"] = attributes["attempt"]
    return [
        RecordedStep(name=name, kind=kinds[name], settings=settings[name], record=decide.StepRecord(name=name, kind=kinds[name], **fields[name]))
        for name in order
    ]


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first place the code leaves the history: ``index`` (1-based, in the order the history
    recorded its steps), ``expected`` (the recorded step, ``None``: the history recorded no more)
    and ``found`` (what the code asked for, ``None``: ``run`` ended), each ``{"name", "kind",
    "settings"?}``; ``message`` says it in a sentence."""

    index: int
    expected: dict | None
    found: dict | None
    message: str


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    """``ok`` (no divergence; true in a boolean context), ``replayed`` (steps answered from the
    history), ``stopped_at`` (the first step without a recorded result, ``None``: ``run`` ended)
    and the :class:`Divergence`, if any."""

    ok: bool
    replayed: int
    stopped_at: str | None
    divergence: Divergence | None = None
    outcome: dict | None = None

    def __bool__(self) -> bool:
        return self.ok

    @property
    def message(self) -> str:
        """One line for humans."""
        if self.divergence is not None:
            return f"diverged at step {self.divergence.index}: {self.divergence.message}"
        where = f"stopped at {self.stopped_at!r}, the first step without a recorded result" if self.stopped_at else "run ended as recorded"
        return f"compatible: {self.replayed} recorded step(s) replayed; {where}"


def _found(request: decide.Request) -> dict:
    out: dict[str, Any] = {"name": request.name, "kind": request.kind}
    if request.args_error is not None:
        out["settings"] = {"argsError": request.args_error}
    elif request.kind == "do":
        assert request.policy is not None
        out["settings"] = {"policy": request.policy.to_json()}
    elif request.kind == "sleep":
        out["settings"] = {"seconds": request.seconds}
    else:
        out["settings"] = {"type": request.event_type, "timeoutSeconds": request.timeout_seconds}
    return out


def _same_settings(recorded: RecordedStep, found: dict) -> bool:
    if recorded.settings is None:
        return True  # the history predates recorded settings
    mine = found.get("settings") or {}
    if recorded.kind == "do" and "policy" in mine:
        return retry.RetryPolicy.from_json(recorded.settings["policy"]).to_json() == mine["policy"]
    return recorded.settings == mine


class Child(Protocol):
    """A child running the workflow's ``run`` (a sandbox child, or the test kit's thread)."""

    def recv(self) -> dict[str, Any]:
        """Its next message (not yet shape-checked); ``TimeoutError`` past the caller's limit."""
        ...

    def answer(self, message: dict[str, Any]) -> None:
        """Answer its pending request."""
        ...


class Replay:
    """One replay of a recorded history (``events``, the recorded ``status``) against a child
    that runs the candidate: :meth:`serve` answers the child until the replay is decided."""

    def __init__(self, events: list[dict], *, status: dict | None) -> None:
        self.status = status
        self.steps = steps_of(events)
        self.by_name = {s.name: s.record for s in self.steps}
        self.asked: list[str] = []  # distinct names in the order the code asked
        self.lifetime = dt.datetime.max.replace(tzinfo=dt.UTC)

    def _result(self, *, stopped_at: str | None, divergence: Divergence | None = None, outcome: dict | None = None) -> ReplayResult:
        replayed = len([n for n in self.asked if n in self.by_name and self.by_name[n].completed])
        return ReplayResult(ok=divergence is None, replayed=replayed, stopped_at=stopped_at, divergence=divergence, outcome=outcome)

    def _diverge(self, index: int, expected: RecordedStep | None, found: dict | None, why: str) -> ReplayResult:
        described = None if expected is None else expected.describe()
        return self._result(
            stopped_at=None, divergence=Divergence(index=index, expected=described, found=found, message=why)
        )

    def serve(self, child: Child) -> ReplayResult:
        """Answer ``child`` from the history until a divergence, the first step without a
        recorded result, or the end of ``run``. Raises :class:`CandidateFailed` when the code does
        not import or construct, ``RuntimeError`` for a child that breaks the protocol,
        ``TimeoutError`` from ``child.recv``."""
        try:
            return self._serve(child)
        except (protocol.ProtocolError, parent.ProtocolViolation) as exc:
            raise RuntimeError(f"the workflow process broke the host protocol: {exc}") from None

    def _serve(self, child: Child) -> ReplayResult:
        while True:
            message = child.recv()
            if message.get("op") == "_fatal":
                raise RuntimeError(f"the runtime stopped: {message.get('message')}")
            message = protocol.check_child_message(message)
            op = message["op"]
            if op == "binding":  # outside a step: answered as a host that cannot be reached
                child.answer({"op": "binding_error", "name": "backend_unavailable", "message": "no bindings in replay"})
                continue
            if op in ("do", "sleep", "wait"):
                answer = self._step(parent.step_request(message))
                if isinstance(answer, ReplayResult):
                    return answer
                child.answer(answer)
                continue
            return self._end(message)

    def _step(self, request: decide.Request) -> dict | ReplayResult:
        found = _found(request)
        if request.name not in self.asked:
            index = len(self.asked) + 1
            self.asked.append(request.name)
            expected = self.steps[index - 1] if index <= len(self.steps) else None
            if expected is None:
                return self._result(stopped_at=request.name)  # a new step after the recorded ones
            if expected.name != request.name:
                return self._diverge(
                    index, expected, found,
                    f"the history recorded {expected.kind} step {expected.name!r} here; the code asked for {request.kind} step {request.name!r}",
                )
            if expected.kind != request.kind:
                return self._diverge(
                    index, expected, found,
                    f"step {request.name!r} was recorded as a {expected.kind} step; the code asks for a {request.kind} step",
                )
            if not expected.record.completed and not _same_settings(expected, found):
                return self._diverge(
                    index, expected, found,
                    f"step {request.name!r} is unfinished in the history with settings {expected.settings}; the code asks"
                    f" for {found.get('settings')} (the host keeps the first settings)",
                )
        decision = decide.decide(
            request, self.by_name.get(request.name), now=_NOW, known_steps=len(self.by_name), lifetime_ends_at=self.lifetime
        )
        answer = parent.recorded_answer(decision)
        if answer is not None:
            return answer
        if isinstance(decision, decide.EndInstance):
            index = self.asked.index(request.name) + 1
            expected = next((s for s in self.steps if s.name == request.name), None)
            return self._diverge(index, expected, found, decision.message)
        return self._result(stopped_at=request.name)  # no recorded result: replay ends here

    def _end(self, message: dict) -> ReplayResult:
        """``run`` ended (returned, failed, or a mismatch)."""
        unvisited = [s for s in self.steps if s.name not in self.asked]
        if message["op"] == "mismatch":
            outcome = {"status": "errored", "error": {"reason": "step_definition_mismatch", "message": message["message"]}}
        elif message["op"] == "run_returned":
            outcome = {"status": "complete", "output": message["output"]}
        elif message["op"] == "run_failed":
            if message["phase"] in ("import", "construct"):
                raise CandidateFailed(f"the candidate failed at {message['phase']}: {message['message']}")
            reason, text = parent.run_failure(message, self.by_name)
            outcome = {"status": "errored", "error": parent.errored_error(reason, text)}
        else:
            raise RuntimeError(f"unexpected message {message['op']!r} in replay")
        if unvisited:
            first = unvisited[0]
            return dataclasses.replace(
                self._diverge(
                    self.steps.index(first) + 1, first, None,
                    f"run ended ({outcome['status']}) without asking for the recorded step {first.name!r}",
                ),
                outcome=outcome,
            )
        status = self.status
        if status is not None and status.get("status") in _TERMINAL and status.get("status") != "terminated":
            expected = {k: v for k, v in status.items() if k in ("status", "output", "error")}
            if {k: v for k, v in outcome.items() if v is not None} != expected:
                return dataclasses.replace(
                    self._result(
                        stopped_at=None,
                        divergence=Divergence(
                            index=len(self.steps) + 1,
                            expected=None,
                            found=None,
                            message=f"run ended with {json.dumps(outcome, sort_keys=True)}; the history recorded {json.dumps(expected, sort_keys=True)}",
                        ),
                    ),
                    outcome=outcome,
                )
        return self._result(stopped_at=None, outcome=outcome)


#: Replay reads no clock: a recorded step replays whatever the time; an unrecorded one stops it.
_NOW = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
