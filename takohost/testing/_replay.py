"""Replay a recorded history against workflow code: does this code still follow it?
(docs/testing.md "Replaying a history"; Temporal's ``Replayer`` is the model.)

A history file is what ``takohost instances history WF ID --export FILE`` writes (or
:meth:`HistoryFile.of_instance` for an in-process instance)::

    {"format": "takohost.history/1", "workflow": "...", "instanceId": "...",
     "status": {"status", "output"?, "error"?}, "events": [<the HTTP history's events>]}

:func:`replay` runs the code once, in process, in a fresh context: every step it asks for is
compared, in order, with the steps the history recorded (by their first record), and answered
from the record with the host's own decision (``decide``: a completed name replays its result or
failure). The first step that differs — another name, another kind, or (for a step the history
left unfinished, whose first settings the host would keep) other settings — is the divergence.
Replay stops, compatible, at the first step without a recorded result (no effect runs, no event
is read); a run that ends early, or ends with another output than the recorded one, diverges.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pathlib
from typing import Any

from takohost.domain import decide, retry
from takohost.runtime import parent, protocol
from takohost.testing import _child, _instance

__all__ = ["FORMAT", "Divergence", "HistoryFile", "RecordedStep", "ReplayResult", "load_history", "replay"]

#: The ``format`` of a history file.
FORMAT = "takohost.history/1"


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


@dataclasses.dataclass(frozen=True)
class HistoryFile:
    """A parsed history file (see the module doc)."""

    events: list[dict]
    instance_id: str
    workflow: str | None = None
    status: dict | None = None

    @classmethod
    def of_instance(cls, instance: _instance.Instance) -> HistoryFile:
        """The history of an in-process instance, as an export would write it."""
        status: dict[str, Any] = {"status": instance.status}
        if instance.status == "complete" and instance.output is not None:
            status["output"] = instance.output
        if instance.status == "errored" and instance.error is not None:
            status["error"] = instance.error
        return cls(events=instance.history, instance_id=instance.id, workflow=instance.workflow.class_name, status=status)

    def to_json(self) -> dict:
        """The file's JSON document."""
        body: dict[str, Any] = {"format": FORMAT}
        if self.workflow is not None:
            body["workflow"] = self.workflow
        body["instanceId"] = self.instance_id
        if self.status is not None:
            body["status"] = self.status
        body["events"] = self.events
        return body

    @property
    def params(self) -> dict | None:
        """The instance's params (served with ``InstanceCreated``)."""
        for event in self.events:
            if event.get("eventType") == "InstanceCreated":
                return (event.get("attributes") or {}).get("params")
        return None

    def steps(self) -> list[RecordedStep]:
        """The recorded steps in the order they were first recorded (what replay asks for again)."""
        return _steps_of(self.events)


def load_history(source: str | pathlib.Path | dict) -> HistoryFile:
    """Read a history file (a path, or its parsed JSON). Raises ``ValueError`` when it is not one."""
    data = source if isinstance(source, dict) else json.loads(pathlib.Path(source).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("events"), list):
        raise ValueError(f"not a takohost history file (format {FORMAT!r} with events)")
    instance_id = data.get("instanceId")
    if not isinstance(instance_id, str):
        raise ValueError("a history file needs its instanceId")
    return HistoryFile(
        events=data["events"], instance_id=instance_id, workflow=data.get("workflow"), status=data.get("status")
    )


def _when(text: object) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None


def _steps_of(events: list[dict]) -> list[RecordedStep]:
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


def replay(
    target: type | str | pathlib.Path | _instance.Workflow,
    history_file: str | pathlib.Path | dict | HistoryFile,
    *,
    class_name: str | None = None,
    env: dict[str, Any] | None = None,
    timeout: float = 30.0,
) -> ReplayResult:
    """Replay ``history_file`` against ``target`` (a workflow class, a deployable directory or
    ``testing.workflow(...)``) and return the :class:`ReplayResult` (see the module doc). Raises
    ``ValueError`` for a file that is not a history, ``TimeoutError`` for code that runs
    ``timeout`` s without a step request."""
    from takohost import testing

    spec = target if isinstance(target, _instance.Workflow) else testing.workflow(target, class_name=class_name, env=env)
    recorded = history_file if isinstance(history_file, HistoryFile) else load_history(history_file)
    return _Replay(spec, recorded, timeout=timeout).run()


class _Replay:
    def __init__(self, workflow: _instance.Workflow, recorded: HistoryFile, *, timeout: float) -> None:
        self.workflow = workflow
        self.recorded = recorded
        self.steps = recorded.steps()
        self.by_name = {s.name: s.record for s in self.steps}
        self.timeout = timeout
        self.asked: list[str] = []  # distinct names in the order the code asked
        self.lifetime = dt.datetime.max.replace(tzinfo=dt.UTC)

    def run(self) -> ReplayResult:
        event: dict[str, Any] = {"instanceId": self.recorded.instance_id}
        if self.recorded.params is not None:
            event["params"] = self.recorded.params
        job = {
            "className": self.workflow.class_name,
            "vars": self.workflow.variables,
            "bindings": list(self.workflow.bindings),
            "event": event,
        }
        child = _child.ChildThread(loader=self.workflow.loader, job=job, timeout=self.timeout)
        try:
            return self._serve(child)
        finally:
            child.kill()
            self.workflow.loader.cleanup()

    def _result(self, *, stopped_at: str | None, divergence: Divergence | None = None, outcome: dict | None = None) -> ReplayResult:
        replayed = len([n for n in self.asked if n in self.by_name and self.by_name[n].completed])
        return ReplayResult(ok=divergence is None, replayed=replayed, stopped_at=stopped_at, divergence=divergence, outcome=outcome)

    def _diverge(self, index: int, expected: RecordedStep | None, found: dict | None, why: str) -> ReplayResult:
        described = None if expected is None else expected.describe()
        return self._result(
            stopped_at=None, divergence=Divergence(index=index, expected=described, found=found, message=why)
        )

    def _serve(self, child: _child.ChildThread) -> ReplayResult:
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
        if isinstance(decision, decide.Resolve):
            return {"op": "resolve", "result": decision.result}
        if isinstance(decision, decide.Raise):
            return {"op": "raise", "error": decision.error, "message": decision.message}
        if isinstance(decision, decide.RejectArgs):
            return {"op": "reject_args"}
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
        status = self.recorded.status
        if status is not None and status.get("status") in _instance.TERMINAL and status.get("status") != "terminated":
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
