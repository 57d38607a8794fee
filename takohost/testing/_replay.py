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
import json
import pathlib
from typing import Any

from takohost.runtime import replay_check
from takohost.testing import _child, _instance

__all__ = ["FORMAT", "Divergence", "HistoryFile", "RecordedStep", "ReplayResult", "load_history", "replay"]

#: The ``format`` of a history file.
FORMAT = "takohost.history/1"


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

    def steps(self) -> list[replay_check.RecordedStep]:
        """The recorded steps in the order they were first recorded (what replay asks for again)."""
        return replay_check.steps_of(self.events)


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


def replay(
    target: type | str | pathlib.Path | _instance.Workflow,
    history_file: str | pathlib.Path | dict | HistoryFile,
    *,
    class_name: str | None = None,
    env: dict[str, Any] | None = None,
    timeout: float = 30.0,
) -> replay_check.ReplayResult:
    """Replay ``history_file`` against ``target`` (a workflow class, a deployable directory or
    ``testing.workflow(...)``) and return the :class:`ReplayResult` (see the module doc). Raises
    ``ValueError`` for a file that is not a history, ``replay_check.CandidateFailed`` when the
    code does not import or construct, ``TimeoutError`` for code that runs ``timeout`` s without a
    step request."""
    from takohost import testing

    spec = target if isinstance(target, _instance.Workflow) else testing.workflow(target, class_name=class_name, env=env)
    recorded = history_file if isinstance(history_file, HistoryFile) else load_history(history_file)
    event: dict[str, Any] = {"instanceId": recorded.instance_id}
    if recorded.params is not None:
        event["params"] = recorded.params
    job = {"className": spec.class_name, "vars": spec.variables, "bindings": list(spec.bindings), "event": event}
    child = _child.ChildThread(loader=spec.loader, job=job, timeout=timeout)
    try:
        return replay_check.Replay(recorded.events, status=recorded.status).serve(child)
    finally:
        child.kill()
        spec.loader.cleanup()


Divergence = replay_check.Divergence
ReplayResult = replay_check.ReplayResult
RecordedStep = replay_check.RecordedStep



