"""One workflow instance run in process: the rows the engine keeps in Postgres (the instance, its
steps, timers, inbox and history) in memory, and the replay contexts that answer its child.

The semantics are the engine's own code: ``decide`` decides each step, ``commits`` says what each
commit records, ``history`` builds and serves the events, ``parent`` turns the child's messages
into requests and outcomes, ``inbox`` rules ``send_event``, and the child is the sandbox's run
driver (``_child``). What is this module's own is only what the engine does in SQL — applying a
commit plan to the rows (``store.ContextStore.apply``: a step upsert keeps its first kind, config
and timeout), taking the token (``START_CONTEXT``), firing timers (``timers.fire_due``), the
terminal commit and ``send_event``'s statement — and the virtual clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from takohost import errors
from takohost.domain import commits, decide, deepjson, history, identifiers, replay_order
from takohost.domain import inbox as inbox_rules
from takohost.runtime import bindings as runtime_bindings
from takohost.runtime import parent, protocol, tracebacks
from takohost.testing import _child

#: ``history.Event`` under a name that the ``history`` property of :class:`Instance` cannot shadow.
_Event = history.Event

__all__ = ["TERMINAL", "Instance", "Workflow"]

TERMINAL = ("complete", "errored", "terminated")
_ABSENT: Any = object()
_STEP_ANSWERS = frozenset({"do", "sleep", "wait"})


@dataclasses.dataclass
class Workflow:
    """What an instance runs: a loader of its main module (fresh per context), the class name,
    ``env`` vars, binding names and a label standing for the Version uid."""

    loader: _child.Loader
    class_name: str
    variables: dict[str, Any]
    bindings: tuple[str, ...]
    version_uid: str


@dataclasses.dataclass
class _Inbox:
    sequence: int
    type: str
    payload: Any
    size: int
    accepted_at: dt.datetime


class _Stop(Exception):
    """Internal: the context is over."""


class _Violation(Exception):
    """The child broke the protocol (the instance ends ``run_threw``)."""


class Instance:
    """One instance of a workflow, run in process with virtual time. Build it with
    ``takohost.testing.start``; read :attr:`status`, :attr:`output`, :attr:`error`,
    :attr:`history`; drive it with :meth:`send_event`, :meth:`advance`, :meth:`run` and
    :meth:`terminate`. Not thread-safe (one test thread drives it)."""

    def __init__(
        self,
        workflow: Workflow,
        *,
        instance_id: str,
        params: Any,
        now: dt.datetime,
        auto: bool,
        fail: dict[str, int] | None,
        bindings: dict[str, Any] | None,
        timeout: float,
    ) -> None:
        self.workflow = workflow
        self.id = identifiers.validate_scalar_string(instance_id, what="instance id")
        runtime_bindings.check_document_argument(params, what="params")
        self.params = None if params is None else documents_copy(params)
        if now.tzinfo is None:
            raise ValueError("now must be an aware datetime (UTC)")
        #: The virtual clock (aware UTC): moves only by :meth:`advance` and fired timers.
        self.now = now.astimezone(dt.UTC)
        self.auto = auto
        self.timeout = timeout
        self.status = "queued"
        self.output: Any = None
        self.error: dict | None = None
        #: Replay contexts run so far (each a fresh child with fresh module state).
        self.contexts = 0
        self.epoch = 0
        self.lifetime_ends_at = self.now + dt.timedelta(seconds=decide.LIFETIME_SECONDS)
        self._events: list[tuple[str, dict, dt.datetime]] = []
        self._rows: dict[str, decide.StepRecord] = {}
        self._timers: dict[str, dt.datetime] = {"lifetime": self.lifetime_ends_at}
        self._inbox: list[_Inbox] = []
        self._next_sequence = 1
        self._failures: dict[str, list[dict]] = {}
        self._bindings = dict(bindings or {})
        self._runnable = True
        for name, times in (fail or {}).items():
            self.fail(name, times=times)
        self._append([history.instance_created(self.id)])
        self._settle()

    # -- what a test reads --------------------------------------------------------------------------
    @property
    def history(self) -> list[dict]:
        """Every history event, oldest first, in the HTTP history's shape (docs/spec/durable-workflow.md#dw-history,
        ``history.served``): ``{"eventId", "eventTimestamp", "eventType", "attributes"}``."""
        results = {name: row.result for name, row in self._rows.items()}
        return [
            history.served(
                event_id=index,
                event_type=event_type,
                attributes=attributes,
                timestamp=stamp,
                results=results,
                params=self.params,
            )
            for index, (event_type, attributes, stamp) in enumerate(self._events, start=1)
        ]

    @property
    def event_types(self) -> list[str]:
        """The history's event types, oldest first."""
        return [event_type for event_type, _, _ in self._events]

    def step(self, name: str) -> decide.StepRecord | None:
        """The stored record of step ``name`` (``None``: not recorded)."""
        return self._rows.get(name)

    @property
    def steps(self) -> list[str]:
        """Recorded step names in the order they were first recorded."""
        return list(self._rows)

    @property
    def next_timer(self) -> tuple[str, dt.datetime] | None:
        """The earliest timer ``(kind, due)``: ``wake``, ``retry``, ``timeout`` or ``lifetime``."""
        if not self._timers:
            return None
        kind = min(self._timers, key=lambda k: self._timers[k])
        return kind, self._timers[kind]

    @property
    def done(self) -> bool:
        """True once the instance is terminal."""
        return self.status in TERMINAL

    def __repr__(self) -> str:
        return f"<Instance {self.id!r} {self.status} at {history.rfc3339(self.now)}>"

    # -- what a test does ---------------------------------------------------------------------------
    def fail(self, name: str, *, times: int = 1, error_type: str = "InjectedFailure", message: str = "") -> None:
        """Make the next ``times`` attempts of ``step.do(name)`` fail with ``error_type: message``
        without running the effect (as if it had raised); its retry policy applies as usual."""
        if type(times) is not int or times < 0:
            raise ValueError("times must be an int >= 0")
        queued = self._failures.setdefault(name, [])
        for _ in range(times):
            text = message or f"injected failure of step {name!r} (takohost.testing)"
            queued.append({"type": error_type, "message": text})

    def send_event(self, type: str, payload: Any = _ABSENT) -> None:  # noqa: A002 - the SDK's name
        """Accept an event now (docs/spec/durable-workflow.md#dw-events sendEvent): a waiting matching wait takes it at once and
        the instance runs on; otherwise it is queued. Raises ``TypeError`` (bad type),
        ``InvalidParams`` / ``DocumentTooLarge`` (payload), ``InstanceTerminal``,
        ``EventQueueFull``."""
        event_type = identifiers.validate_scalar_string(type, what="event type")
        has_payload = payload is not _ABSENT
        if has_payload:
            runtime_bindings.check_document_argument(payload, what="payload")
            payload = documents_copy(payload)
        if self.done:
            raise errors.InstanceTerminal(f"the instance is {self.status}; it takes no more events")
        size = inbox_rules.event_size(event_type, payload, has_payload=has_payload)
        wait = next((row for row in self._rows.values() if row.kind == "wait" and row.state == "pending"), None)
        direct = inbox_rules.delivers_to_wait(
            status=self.status,
            stopping=None,
            wait_type=None if wait is None else (wait.config or {}).get("type"),
            wait_timeout_at=None if wait is None else wait.timeout_at,
            event_type=event_type,
            now=self.now,
        )
        sequence = self._next_sequence
        if not direct:
            full = inbox_rules.queue_full(
                count=len(self._inbox), total_bytes=sum(e.size for e in self._inbox), size=size
            )
            if full is not None:
                raise errors.EventQueueFull(full)
        self._next_sequence += 1
        value = payload if has_payload else None
        if direct:
            assert wait is not None
            # services.instance_events: consumed by the wait at once (the same commit plan).
            self._apply(commits.event_delivered(wait=wait, sequence=sequence, event_type=event_type, payload=value))
            self._runnable = True
        else:
            self._inbox.append(_Inbox(sequence, event_type, value, size, self.now))
            self._apply(commits.event_queued(sequence=sequence, event_type=event_type))
        self._settle()

    def advance(self, seconds: float) -> None:
        """Move the virtual clock ``seconds`` on, firing every timer that comes due on the way at
        its due time (sleeps wake, retries run, waits time out) and running the contexts they
        start. With ``auto`` the instance then runs on to its end as well."""
        if seconds < 0:
            raise ValueError("time does not go back")
        target = self.now + dt.timedelta(seconds=seconds)
        self._run_contexts()
        while not self.done and self._timers and min(self._timers.values()) <= target:
            self._fire(min(self._timers.values()))
        self.now = max(self.now, target)
        self._settle()

    def run(self, *, until_waiting: bool = False) -> Instance:
        """Fire every timer as it comes due until the instance is terminal: sleeps, retry delays
        and wait timeouts complete at once, the clock jumping to each (what ``auto`` does after
        every call). ``until_waiting``: stop as soon as the instance waits for an event instead
        (its timeout is left for :meth:`advance` or a later ``run``). Returns the instance."""
        self._run_contexts()
        while not self.done and self._timers and not (until_waiting and self.status == "waiting"):
            self._fire(min(self._timers.values()))
        return self

    def terminate(self) -> None:
        """Terminate the instance (``InstanceTerminated``); a terminal instance stays as it is."""
        if self.done:
            return
        self.epoch += 1
        self.status = "terminated"
        self._inbox.clear()
        self._timers.clear()
        self._runnable = False
        self._append([history.terminated()])

    # -- the host's part ----------------------------------------------------------------------------
    def _settle(self) -> None:
        self._run_contexts()
        if self.auto:
            self.run()

    def _fire(self, due: dt.datetime) -> None:
        """``timers.fire_due`` at ``due``: the due timers go, the instance becomes runnable."""
        self.now = max(self.now, due)
        for kind in [k for k, at in self._timers.items() if at <= self.now]:
            del self._timers[kind]
        if self.status in ("queued", "sleeping", "waiting", "running"):
            if self.status != "queued":
                self.status = "running"
            self._runnable = True
        self._run_contexts()

    def _run_contexts(self) -> None:
        while self._runnable and not self.done:
            self._runnable = False
            if self.status not in ("queued", "running") or "retry" in self._timers:
                return  # START_CONTEXT's conditions
            _Context(self).run()

    def _append(self, events: list[_Event]) -> None:
        after = self._events[-1][2] if self._events else None
        for event, stamp in zip(events, history.stamps(events, now=self.now, after=after), strict=True):
            self._events.append((event.event_type, dict(event.attributes), stamp))

    def _apply(self, commit: commits.Commit) -> None:
        """``store.ContextStore.apply`` on the in-memory rows."""
        self._append(commit.events)
        if commit.status is not None:
            self.status = commit.status
        row = commit.step
        if row is not None:
            stored = self._rows.get(row.name)
            if stored is None:
                self._rows[row.name] = row
            else:  # ON CONFLICT keeps kind, config and timeout_at (the first stored settings)
                self._rows[row.name] = dataclasses.replace(
                    stored,
                    state=row.state,
                    attempts=row.attempts,
                    result=row.result,
                    error=row.error,
                    wake_at=row.wake_at,
                )
        if commit.timer is not None:
            self._timers[commit.timer[0]] = commit.timer[1]
        if commit.cancel_timer is not None:
            self._timers.pop(commit.cancel_timer, None)

    def _terminal(self, *, status: str, output: Any = None, error: dict | None = None, details: dict | None = None) -> None:
        event = history.completed() if status == "complete" else history.errored(error or {}, details=details)
        self._append([event])
        self.status, self.output, self.error = status, output, error
        self._inbox.clear()
        self._timers.clear()

    def _injected(self, name: str) -> dict | None:
        queued = self._failures.get(name)
        return queued.pop(0) if queued else None

    def _answer_binding(self, message: dict) -> dict:
        handler = self._bindings.get(message["binding"])
        if message["binding"] not in self.workflow.bindings and handler is None:
            raise _Violation(f"unknown binding {protocol.safe_text(message['binding'])!r}")
        if handler is None:
            return {
                "op": "binding_error",
                "name": "backend_unavailable",
                "message": f"binding {message['binding']!r} is not simulated: pass bindings={{...}} to start()",
            }
        try:
            value = handler(message["call"], message["args"])
        except TypeError as exc:
            return {"op": "binding_error", "name": runtime_bindings.TYPE_ERROR_NAME, "message": str(exc)}
        except errors.HostError as exc:
            return {"op": "binding_error", "name": exc.name, "message": exc.message}
        return {"op": "binding_result", "value": value}


class _Context:
    """One replay context (``workers.engine.context.ReplayContext``, in process)."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.child: _child.ChildThread | None = None
        self.steps: dict[str, decide.StepRecord] = {}
        self.replay: replay_order.ReplayOrder | None = None

    def run(self) -> None:
        """Run the context to its end (a suspension, a terminal status); the child is stopped and
        the import system restored afterwards, whatever happened."""
        instance = self.instance
        try:
            self._run()
        except _Stop:
            pass
        finally:
            self._kill()
            instance.workflow.loader.cleanup()

    def _run(self) -> None:
        instance = self.instance
        queued = instance.status == "queued"
        lifetime_over = instance.now >= instance.lifetime_ends_at
        if not lifetime_over:
            self.child = _child.ChildThread(loader=instance.workflow.loader, job=self._job(), timeout=instance.timeout)
        instance.epoch += 1
        instance.status = "running"
        instance.contexts += 1
        instance._append([history.context_started(instance.workflow.version_uid, instance.epoch)])
        if lifetime_over:
            self._end_errored("lifetime_exceeded", "the instance reached its lifetime of 31536000 seconds")
        self.steps = {} if queued else dict(instance._rows)
        self.replay = replay_order.ReplayOrder(list(self.steps))
        self._serve()

    def _job(self) -> dict:
        event: dict[str, Any] = {"instanceId": self.instance.id}
        if self.instance.params is not None:
            event["params"] = documents_copy(self.instance.params)
        workflow = self.instance.workflow
        return {
            "className": workflow.class_name,
            "vars": workflow.variables,
            "bindings": list(workflow.bindings),
            "event": event,
        }

    # -- messages -----------------------------------------------------------------------------------
    def _recv(self) -> dict:
        assert self.child is not None
        message = self.child.recv()
        if message.get("op") == "_fatal":
            raise _Violation(str(message.get("message")))
        try:
            return protocol.check_child_message(message)
        except protocol.ProtocolError as exc:
            raise _Violation(str(exc)) from None

    def _send(self, message: dict) -> None:
        assert self.child is not None
        self.child.answer(message)

    def _kill(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child = None

    def _serve(self) -> None:
        try:
            while True:
                message = self._recv()
                op = message["op"]
                if op in _STEP_ANSWERS:
                    self._step(message)
                elif op == "binding":
                    self._send(self.instance._answer_binding(message))
                elif op == "run_returned":
                    self._diverged(self.replay.at_end() if self.replay else None)
                    self._returned(message["output"])
                elif op == "run_failed":
                    if message["phase"] == "run":
                        self._diverged(self.replay.at_end() if self.replay else None)
                    reason, text = parent.run_failure(message, self.steps)
                    self._end_errored(reason, text, frames=tracebacks.clean_frames(message.get("traceback")))
                elif op == "mismatch":
                    self._end_errored("step_definition_mismatch", message["message"])
                else:
                    raise _Violation(f"unexpected message {op!r}")
        except (_Violation, parent.ProtocolViolation) as exc:
            self._end_errored("run_threw", f"the workflow process broke the host protocol: {exc}")

    def _diverged(self, divergence: replay_order.Divergence | None) -> None:
        if divergence is not None:
            self.instance._apply(commits.Commit(events=[history.replay_diverged(divergence.attributes())]))

    # -- steps --------------------------------------------------------------------------------------
    def _step(self, message: dict) -> None:
        instance = self.instance
        request = parent.step_request(message)
        if self.replay is not None:
            self._diverged(self.replay.visit(request.name))
        if message.get("eager") is True:
            raise _Violation("an eager step.do before the host granted eager first attempts")
        decision = decide.decide(
            request,
            self.steps.get(request.name),
            now=instance.now,
            known_steps=len(self.steps),
            lifetime_ends_at=instance.lifetime_ends_at,
        )
        answer = parent.recorded_answer(decision)
        if answer is not None:
            self._send(answer)
        elif isinstance(decision, decide.EndInstance):
            self._end_errored(decision.reason, decision.message)
        elif isinstance(decision, decide.RunEffect):
            self._run_effect(request.name, decision)
        elif isinstance(decision, decide.CompleteSleep):
            instance._apply(
                commits.sleep_completed(
                    name=request.name, seconds=request.seconds, wake_at=decision.wake_at, new=decision.new
                )
            )
            self.steps[request.name] = decide.StepRecord(
                name=request.name, kind="sleep", state="succeeded", wake_at=decision.wake_at
            )
            self._send({"op": "resolve", "result": None})
        elif isinstance(decision, decide.Suspend):
            self._kill()
            instance._apply(commits.suspend(suspend=decision, name=request.name, seconds=request.seconds))
            raise _Stop
        else:
            assert isinstance(decision, decide.TryWait)
            self._wait(request.name, decision)

    def _run_effect(self, name: str, decision: decide.RunEffect) -> None:
        instance = self.instance
        started_at = instance.now
        injected = instance._injected(name)
        if injected is not None:
            outcome = decide.decide_outcome(
                attempt=decision.attempt, policy=decision.policy, ok=False, error=injected, now=instance.now
            )
        else:
            self._send({"op": "run_effect", "attempt": decision.attempt})
            while True:
                message = self._recv()
                if message["op"] == "binding":
                    self._send(instance._answer_binding(message))
                    continue
                if message["op"] == "mismatch":  # a step method called from inside the effect
                    self._end_errored("step_definition_mismatch", message["message"])
                if message["op"] != "effect_result" or message["name"] != name:
                    raise _Violation(f"expected the effect_result of {name!r}, got {message['op']!r}")
                outcome = parent.attempt_outcome(message, decision=decision, now=instance.now)
                break
        retrying = isinstance(outcome, decide.AttemptFailedRetry)
        if retrying:
            self._kill()  # each attempt runs in a fresh context, even with delay 0
        instance._apply(
            commits.attempt(
                name=name,
                run=decision,
                started_at=started_at,
                outcome=outcome,
                lifetime_ends_at=instance.lifetime_ends_at,
            )
        )
        if isinstance(outcome, decide.AttemptFailedRetry):
            if outcome.delay == 0:  # no timer row: the engine dispatches the fresh context now
                instance._runnable = True
            raise _Stop
        assert isinstance(outcome, decide.AttemptSucceeded | decide.AttemptFailedFinal)
        self.steps[name] = parent.record_after_attempt(name, decision=decision, outcome=outcome)
        self._send(parent.settled_answer(outcome))

    def _wait(self, name: str, decision: decide.TryWait) -> None:
        instance = self.instance
        found = next(
            (e for e in instance._inbox if e.type == decision.event_type and e.accepted_at <= decision.timeout_at),
            None,
        )
        if found is not None:
            instance._inbox.remove(found)
            instance._apply(commits.wait_consumed(name=name, wait=decision, sequence=found.sequence, payload=found.payload))
            self.steps[name] = decide.StepRecord(name=name, kind="wait", state="succeeded", result=found.payload)
            self._send({"op": "resolve", "result": found.payload})
            return
        if instance.now >= decision.timeout_at:
            instance._apply(commits.wait_timed_out(name=name, wait=decision))
            message = parent.wait_timeout_message(decision)
            self.steps[name] = decide.StepRecord(name=name, kind="wait", state="failed", error={"message": message})
            self._send({"op": "raise", "error": "wait_timeout", "message": message})
            return
        self._kill()
        instance._apply(
            commits.wait_suspend(name=name, wait=decision, arrived=False, lifetime_ends_at=instance.lifetime_ends_at)
        )
        raise _Stop

    # -- ends ---------------------------------------------------------------------------------------
    def _returned(self, output: object) -> None:
        problem = parent.output_problem(output)
        if problem is not None:
            self._end_errored("run_threw", problem)
        self._kill()
        self.instance._terminal(status="complete", output=output)
        raise _Stop

    def _end_errored(self, reason: str, message: str, *, frames: list[dict] | None = None) -> None:
        self._kill()
        details = {"traceback": frames} if frames else None
        self.instance._terminal(status="errored", error=parent.errored_error(reason, message), details=details)
        raise _Stop


def documents_copy(value: Any) -> Any:
    """A deep copy of a document (through JSON, as the host stores it; any depth)."""
    return deepjson.loads(deepjson.dumps(value))
