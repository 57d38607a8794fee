"""An in-memory parent that plays the replay-context driver against real sandbox children.

It keeps step records (``decide.StepRecord``, the engine's own type of a ``steps`` row: a do's
``config`` holds its ``policy``, a wait's its ``type``, a failure's ``error`` its ``message``) in a
dict keyed by name (as the real driver keeps ``steps`` rows), answers
the child as ``takohost/runtime/PROTOCOL.md`` says, and stops a context the way the driver does:
``kill_and_wait`` before reporting ``sleeping`` / ``waiting`` / a retry / a terminal outcome. No
Postgres, no clock: sleeps are woken and waits timed out by the test (``wake_sleeps``,
``time_out_waits``), events are queued with ``send_event``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from takohost.domain import decide, documents, retry
from takohost.runtime import protocol
from workers import sandbox

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Outcome:
    """How one context ended.

    ``status``: ``complete`` | ``errored`` | ``sleeping`` | ``waiting`` | ``retry`` (an attempt
    failed with attempts left) | ``stopped`` (``stop_when`` fired) | ``crashed`` (the child died
    on its own). ``kill_proven`` is ``kill_and_wait``'s answer.
    """

    status: str
    pid: int
    output: dict[str, Any] | None = None
    reason: str | None = None
    message: str | None = None
    kill_proven: bool = False


def default_binding_handler(message: dict[str, Any]) -> dict[str, Any]:
    """Answer binding calls with plausible values (tests override this)."""
    call, args = message["call"], message["args"]
    if call in ("create", "get"):
        return {"op": "binding_result", "value": {"id": args.get("id", "generated-id")}}
    if call == "status":
        return {"op": "binding_result", "value": {"status": "running"}}
    return {"op": "binding_result", "value": None}


class FakeParent:
    """Drive one workflow instance through as many contexts (fresh children) as needed.

    ``stop_when(message)`` is called for every child message; returning True makes the parent
    kill the child instead of answering (outcome ``stopped``), as terminate does mid-effect.
    """

    def __init__(
        self,
        zygote: sandbox.Zygote,
        *,
        modules: dict[str, str],
        class_name: str,
        main_module: str = "main.py",
        instance_id: str = "instance-1",
        params: dict[str, Any] | None = None,
        variables: dict[str, Any] | None = None,
        bindings: list[str] | None = None,
        watchdog_seconds: float | None = None,
        binding_handler: Callable[[dict[str, Any]], dict[str, Any]] = default_binding_handler,
        stop_when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.zygote = zygote
        self.job: dict[str, Any] = {
            "kind": "workflow",
            "mainModule": main_module,
            "modules": modules,
            "className": class_name,
            "event": {"instanceId": instance_id, **({"params": params} if params is not None else {})},
            "vars": variables or {},
            "bindings": bindings or [],
        }
        if watchdog_seconds is not None:
            self.job["watchdogSeconds"] = watchdog_seconds
        self.steps: dict[str, decide.StepRecord] = {}
        self.woken: set[str] = set()  # sleeps whose deadline has passed (``wake_sleeps``)
        self.timed_out: set[str] = set()  # waits past their timeout (``time_out_waits``)
        self.inbox: list[tuple[str, dict[str, Any] | None]] = []
        self.messages: list[dict[str, Any]] = []  # every child message, all contexts
        self.logs: list[tuple[int, str, str]] = []  # (context, stream, text) of every log line
        self.dropped = 0  # lines the child reported as dropped over its log budget
        self.effect_runs = 0  # run_effect answers sent
        self.contexts = 0
        self.binding_handler = binding_handler
        self.stop_when = stop_when

    # -- test controls -------------------------------------------------------------------------
    def wake_sleeps(self) -> None:
        """Every pending sleep's deadline has passed."""
        self.woken |= {name for name, r in self.steps.items() if r.kind == "sleep" and r.state == "pending"}

    def time_out_waits(self) -> None:
        """Every pending wait has reached its timeout."""
        self.timed_out |= {name for name, r in self.steps.items() if r.kind == "wait" and r.state == "pending"}

    def send_event(self, event_type: str, payload: dict[str, Any] | None = None) -> None:
        """Queue an event."""
        self.inbox.append((event_type, payload))

    # -- contexts ------------------------------------------------------------------------------
    def run_until_suspended(self, *, max_contexts: int = 10, timeout: float = 10.0) -> Outcome:
        """Run contexts while they end in ``retry``; return the first other outcome."""
        for _ in range(max_contexts):
            outcome = self.run_context(timeout=timeout)
            if outcome.status != "retry":
                return outcome
        raise AssertionError(f"still retrying after {max_contexts} contexts")

    def run_context(self, *, timeout: float = 10.0) -> Outcome:
        """Run one context in a fresh child until it ends or must be stopped."""
        self.contexts += 1
        handle = self.zygote.spawn(self.job)
        if "watchdogSeconds" in self.job:
            handle.start_heartbeat(self.job["watchdogSeconds"] / 5)
        try:
            while True:
                try:
                    message = protocol.check_child_message(handle.recv(timeout=timeout))
                except sandbox.ChildGone:
                    return self._stop(handle, "crashed")
                if message["op"] == "log":  # no answer: tenant output (PROTOCOL.md "Logs")
                    self.logs.extend((self.contexts, stream, text) for _, stream, text in message["lines"])
                    self.dropped += message["dropped"]
                    continue
                self.messages.append(message)
                if self.stop_when is not None and self.stop_when(message):
                    return self._stop(handle, "stopped")
                answer_or_outcome = self._answer(message)
                if isinstance(answer_or_outcome, dict):
                    handle.send(answer_or_outcome)
                else:
                    status, fields = answer_or_outcome
                    return self._stop(handle, status, **fields)
        finally:
            handle.close()

    @staticmethod
    def _stop(handle: sandbox.ChildHandle, status: str, **fields: Any) -> Outcome:
        proven = handle.kill_and_wait()
        return Outcome(status=status, pid=handle.pid, kill_proven=proven, **fields)

    def _answer(self, message: dict[str, Any]) -> dict[str, Any] | tuple[str, dict[str, Any]]:
        op = message["op"]
        handler = getattr(self, f"_on_{op}", None)
        if handler is None:
            raise AssertionError(f"unexpected child message {message}")
        return handler(message)

    def _record(self, message: dict[str, Any], kind: str) -> decide.StepRecord | tuple[str, dict[str, Any]]:
        record = self.steps.get(message["name"])
        if record is not None and record.kind != kind and record.state == "pending":
            return "errored", {
                "reason": "step_definition_mismatch",
                "message": "name reused with another kind",
            }
        if record is None:
            record = decide.StepRecord(name=message["name"], kind=kind, state="pending")
        return record

    def _store(self, record: decide.StepRecord, **changes: Any) -> decide.StepRecord:
        record = dataclasses.replace(record, **changes)
        self.steps[record.name] = record
        return record

    def _replay(self, record: decide.StepRecord) -> dict[str, Any] | None:
        if record.state == "succeeded":
            return {"op": "resolve", "result": record.result}
        if record.state == "failed":
            error = decide.FAILURE_ERROR[record.kind]
            return {"op": "raise", "error": error, "message": (record.error or {}).get("message", "")}
        return None

    def _on_do(self, message: dict[str, Any]) -> Any:
        existing = self.steps.get(message["name"])
        if existing is not None and existing.kind == "do" and (replay := self._replay(existing)):
            return replay
        record = self._record(message, "do")
        if not isinstance(record, decide.StepRecord):
            return record
        if "argsError" in message:
            return {"op": "reject_args"}
        if record.config is None:  # the first stored settings win
            record = dataclasses.replace(record, config={"policy": retry.parse_retry_policy(message["policy"]).to_json()})
        record = self._store(record)
        self.effect_runs += 1
        return {"op": "run_effect", "attempt": record.attempts + 1}

    def _on_effect_result(self, message: dict[str, Any]) -> Any:
        record = self._store(self.steps[message["name"]], attempts=self.steps[message["name"]].attempts + 1)
        ok = message["ok"]
        if ok:
            try:  # the child is untrusted: validate again
                documents.canonical_document(message["result"], allow_none=True)
            except (documents.InvalidDocument, documents.DocumentTooLargeError):
                ok = False
        if ok:
            record = self._store(record, state="succeeded", result=message["result"])
            return {"op": "resolve", "result": record.result}
        assert record.config is not None
        if record.attempts < record.config["policy"]["maxAttempts"]:
            return "retry", {"message": message.get("error", {}).get("message")}
        text = f"step {message['name']!r} failed after {record.attempts} attempt(s)"
        self._store(record, state="failed", error={"message": text})
        return {"op": "raise", "error": "step_failed", "message": text}

    def _on_sleep(self, message: dict[str, Any]) -> Any:
        existing = self.steps.get(message["name"])
        if existing is not None and existing.kind == "sleep" and (replay := self._replay(existing)):
            return replay
        record = self._record(message, "sleep")
        if not isinstance(record, decide.StepRecord):
            return record
        if "argsError" in message:
            return {"op": "reject_args"}
        record = self._store(record)
        if message["seconds"] == 0 or record.name in self.woken:
            self._store(record, state="succeeded")
            return {"op": "resolve", "result": None}
        return "sleeping", {}

    def _on_wait(self, message: dict[str, Any]) -> Any:
        existing = self.steps.get(message["name"])
        if existing is not None and existing.kind == "wait" and (replay := self._replay(existing)):
            return replay
        record = self._record(message, "wait")
        if not isinstance(record, decide.StepRecord):
            return record
        if "argsError" in message:
            return {"op": "reject_args"}
        if record.config is None:
            record = dataclasses.replace(record, config={"type": message["type"]})
        record = self._store(record)
        assert record.config is not None
        for index, (event_type, payload) in enumerate(self.inbox):
            if event_type == record.config["type"]:
                del self.inbox[index]
                self._store(record, state="succeeded", result=payload)
                return {"op": "resolve", "result": payload}
        if record.name in self.timed_out:
            self._store(record, state="failed", error={"message": "timed out"})
            return {"op": "raise", "error": "wait_timeout", "message": "timed out"}
        return "waiting", {}

    def _on_binding(self, message: dict[str, Any]) -> Any:
        return self.binding_handler(message)

    def _on_run_returned(self, message: dict[str, Any]) -> Any:
        try:
            documents.canonical_document(message["output"], allow_none=True)
        except (documents.InvalidDocument, documents.DocumentTooLargeError) as exc:
            return "errored", {"reason": "run_threw", "message": str(exc)}
        return "complete", {"output": message["output"]}

    def _on_run_failed(self, message: dict[str, Any]) -> Any:
        return "errored", {"reason": message["reason"], "message": message["message"]}

    def _on_mismatch(self, message: dict[str, Any]) -> Any:
        return "errored", {"reason": "step_definition_mismatch", "message": message["message"]}
