"""The ``step`` object user code receives, as a client of the parent (docs/spec/durable-workflow.md#dw-abi, docs/spec/worker-forms.md#wf-errors, docs/spec/durable-workflow.md
"Class ABI、replay、step"; wire messages in ``PROTOCOL.md``).

Argument rules (docs/spec/durable-workflow.md: "nameを先に検証し、完了済み名の残りの引数は使わない。未完了名の不正な
JS引数はTypeError"):

1. the name is validated first; a bad name raises ``TypeError`` at once, nothing is sent;
2. the other arguments are checked in the child (pure, exact-type checks that run no user code)
   but **not** raised yet: the request carries either the normalised arguments or ``argsError``;
3. the parent answers from the step record by name: a completed name replays (``resolve`` /
   ``raise``) whatever the other arguments were; an uncompleted name with ``argsError`` gets
   ``reject_args`` and the child raises the ``TypeError`` (catchable, nothing recorded).

Host errors raised here are remembered by identity (``Context.raised``): only an uncaught object
that this module raised as ``StepFailed`` ends the run as ``step_failed`` (docs/spec/worker-forms.md#wf-errors).

Eager first attempts (PROTOCOL.md "Eager first attempts"): once the parent's answer to a step
carries ``eager {steps, until}``, a ``do`` of a name this context has not asked for yet runs its
effect at once, without waiting for ``run_effect``: the request (``"eager": true``) and the
``effect_result`` go out back to back, and the parent answers the pair. At most ``steps`` new
names are asked for after the grant (the 1024-step limit) and none after ``until`` (UTC epoch
milliseconds: the instance's lifetime end).

Overlap (``step_definition_mismatch``, uncatchable): a step method called while another step is
unsettled — from inside an effect, from another thread, or (async ``run``) a second step created
before the first settled (``asyncio.gather``, ``ensure_future``), and a ``run`` that settles while
a step is unsettled. The child then sends ``mismatch`` and kills its own process group: no further
user code runs. In async mode a step counts as started when its method is *called* (a JavaScript
promise starts eagerly), so an un-awaited step is unsettled.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from takohost import errors
from takohost.domain import documents, identifiers, retry
from takohost.runtime import protocol, tracebacks

__all__ = ["AsyncStep", "Channel", "Context", "Step", "effect_result_message", "exception_text"]

_RUN_EFFECT = object()
# The host errors a step may be rejected with. Any kind may get either: a completed name replays
# its recorded outcome whatever kind the new call is (docs/spec/durable-workflow.md#dw-replay: "完了済み名は…記録結果でreplay").
_STEP_ERRORS = frozenset({"step_failed", "wait_timeout"})


class Channel(Protocol):
    """What the step needs from the child's channel (implemented by ``child.channel.Channel``)."""

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; return the parent's next answer (pings are filtered out)."""
        ...

    def send(self, message: dict[str, Any]) -> None:
        """Send ``message`` without waiting for an answer (an eager ``do``)."""
        ...

    def final(self, message: dict[str, Any]) -> NoReturn:
        """Send a last message, then kill the own process group."""
        ...

    def fatal(self, message: str) -> NoReturn:
        """The parent broke the protocol: kill the own process group now."""
        ...


def _type_name(value: object) -> str:
    """A value's type name, read without running a metaclass ``__name__`` property."""
    return type.__dict__["__name__"].__get__(type(value))


def exception_text(exc: BaseException) -> str:
    """``"<Type>: <message>"`` (or just ``"<Type>"``) for reports; frame-safe and bounded."""
    message = protocol.safe_text(exc)
    name = _type_name(exc)
    return protocol.safe_text(f"{name}: {message}" if message else name)


def effect_result_message(
    name: str, *, value: object = None, error: BaseException | None = None
) -> dict[str, Any]:
    """The ``effect_result`` message for an attempt that returned ``value`` or raised ``error``.

    A return value that is not a document (docs/spec/durable-workflow.md#dw-doc) is reported as a failed attempt with
    error type ``InvalidDocument`` / ``DocumentTooLarge``; the parent re-validates either way.
    """
    if error is None:
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            return _failed_effect(
                name, "InvalidDocument", "the effect returned an awaitable; only an async run awaits effects"
            )
        try:
            documents.canonical_document(value, allow_none=True)
        except documents.InvalidDocument as exc:
            return _failed_effect(name, "InvalidDocument", f"the effect result is not a document: {exc}")
        except documents.DocumentTooLargeError as exc:
            return _failed_effect(name, "DocumentTooLarge", f"the effect result is too large: {exc}")
        return {"op": "effect_result", "name": name, "ok": True, "result": value}
    return _failed_effect(
        name, _type_name(error), protocol.safe_text(error), frames=tracebacks.tenant_frames(error)
    )


def _failed_effect(
    name: str, error_type: str, message: str, *, frames: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "type": protocol.safe_text(error_type, limit=256),
        "message": protocol.safe_text(message),
    }
    if frames:
        error["traceback"] = frames
    return {"op": "effect_result", "name": name, "ok": False, "error": error}


class Context:
    """Per-context step state shared by ``Step``/``AsyncStep`` and the run driver.

    ``raised`` maps ``id(error)`` → ``(error, message, step name)`` for every host error this
    context raised; it holds strong references, so an id is never reused while recorded.
    """

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.raised: dict[int, tuple[BaseException, str, str]] = {}
        self._lock = threading.Lock()
        self._active: str | None = None
        self._asked: set[str] = set()  # step names this context asked for
        self._eager_steps = 0  # new names that may still be asked for under the grant
        self._eager_until_ms = 0.0

    # -- eager first attempts ----------------------------------------------------------------------
    def _grant(self, reply: dict[str, Any]) -> None:
        grant = reply.get("eager")
        if grant is None:
            return
        if (
            type(grant) is not dict
            or set(grant) != {"steps", "until"}
            or type(grant["steps"]) is not int
            or grant["steps"] < 0
            or type(grant["until"]) not in (int, float)
        ):
            self.channel.fatal("a malformed eager grant")
        self._eager_steps = grant["steps"]
        self._eager_until_ms = float(grant["until"])

    def ask(self, name: str, *, effect: bool) -> bool:
        """Note a request for ``name``; True when it may run its effect eagerly (``effect``: a
        ``do`` with valid arguments, of a name not asked for yet, within the grant)."""
        if name in self._asked:
            return False
        self._asked.add(name)
        if self._eager_steps <= 0:
            return False
        self._eager_steps -= 1
        return effect and time.time() * 1000 < self._eager_until_ms

    # -- overlap tracking --------------------------------------------------------------------
    def begin(self, kind: str, name: object) -> None:
        """Mark a step as started; a step already unsettled → ``mismatch`` (never returns)."""
        with self._lock:
            if self._active is not None:
                self.mismatch(
                    f"overlapping steps: step.{kind}({_describe(name)}) started while {self._active} was unsettled"
                )
            self._active = f"step.{kind}({_describe(name)})"

    def end(self) -> None:
        """Mark the current step as settled."""
        with self._lock:
            self._active = None

    def unsettled(self) -> str | None:
        """A description of the unsettled step, or ``None``."""
        with self._lock:
            return self._active

    def mismatch(self, message: str) -> NoReturn:
        """Report ``step_definition_mismatch`` and stop the child (no user code runs after)."""
        self.channel.final({"op": "mismatch", "message": protocol.safe_text(message)})

    # -- answers -----------------------------------------------------------------------------
    def settle(
        self,
        reply: dict[str, Any],
        *,
        kind: str,
        name: str,
        args_error: TypeError | None,
        may_run_effect: bool,
    ) -> Any:
        """Turn the parent's answer into a return value, a raised error or ``_RUN_EFFECT``."""
        self._grant(reply)
        op = reply.get("op")
        if op == "resolve":
            result = reply.get("result")
            if result is not None and type(result) is not dict:
                self.channel.fatal("resolve.result must be an object or null")
            return None if kind == "sleep" else result
        if op == "raise":
            error_name = reply.get("error")
            if error_name not in _STEP_ERRORS:
                self.channel.fatal(f"step.{kind} cannot be rejected with {error_name!r}")
            message = protocol.safe_text(reply.get("message", ""))
            error = errors.error_from_name(error_name, message)
            self.raised[id(error)] = (error, message, name)
            raise error
        if op == "reject_args":
            if args_error is None:
                self.channel.fatal("reject_args for a step whose arguments were valid")
            raise args_error
        if op == "run_effect" and may_run_effect and args_error is None:
            return _RUN_EFFECT
        self.channel.fatal(f"unexpected answer {op!r} to step.{kind}")

    def ask_do(self, name: str, request: dict[str, Any], args_error: TypeError | None) -> Any:
        """Ask the parent about ``step.do(name)`` (``request``: ``_do_request``'s): eagerly, without
        waiting, when the grant allows it (PROTOCOL.md "Eager first attempts"), else by a request
        whose answer :meth:`settle` turns into the value, a raised error or ``_RUN_EFFECT``. Returns
        ``_RUN_EFFECT`` when the caller runs the effect now and reports it (:meth:`report_effect`)."""
        if self.ask(name, effect=args_error is None):
            self.channel.send({**request, "eager": True})
            return _RUN_EFFECT
        reply = self.channel.request(request)
        return self.settle(reply, kind="do", name=name, args_error=args_error, may_run_effect=True)

    def report_effect(self, name: str, outcome: dict[str, Any]) -> Any:
        """Send the attempt's ``effect_result`` (``outcome``) and settle ``step.do(name)`` with the
        answer: its value, or the raised ``StepFailed`` (a retry stops the child)."""
        reply = self.channel.request(outcome)
        return self.settle(reply, kind="do", name=name, args_error=None, may_run_effect=False)

    def ask_without_effect(
        self, kind: str, name: str, request: dict[str, Any], args_error: TypeError | None
    ) -> Any:
        """Ask the parent about a step that runs no effect here (``kind`` sleep or wait) and settle
        it with the answer (a value, a raised error, or the child is stopped)."""
        self.ask(name, effect=False)
        reply = self.channel.request(request)
        return self.settle(reply, kind=kind, name=name, args_error=args_error, may_run_effect=False)

    def genuine_step_failed(self, exc: BaseException) -> tuple[str, str] | None:
        """``(message, step name)`` if ``exc`` is a ``StepFailed`` object raised by this context."""
        entry = self.raised.get(id(exc))
        if entry is None or entry[0] is not exc or not isinstance(exc, errors.StepFailed):
            return None
        return entry[1], entry[2]


def _describe(name: object) -> str:
    return repr(name) if type(name) is str and len(name) <= 80 else f"<{_type_name(name)}>"


def _do_request(name: str, effect: object, retry_policy: object) -> tuple[dict[str, Any], TypeError | None]:
    try:
        if not callable(effect):
            raise TypeError(f"step.do effect must be a zero-argument callable, not {_type_name(effect)}")
        policy = retry.parse_retry_policy(retry_policy).to_json()
    except TypeError as exc:
        return {"op": "do", "name": name, "argsError": protocol.safe_text(exc)}, exc
    return {"op": "do", "name": name, "policy": dict(policy)}, None


def _sleep_request(name: str, seconds: object) -> tuple[dict[str, Any], TypeError | None]:
    try:
        value = identifiers.validate_sleep_seconds(seconds)
    except TypeError as exc:
        return {"op": "sleep", "name": name, "argsError": protocol.safe_text(exc)}, exc
    return {"op": "sleep", "name": name, "seconds": value}, None


def _wait_request(name: str, options: object) -> tuple[dict[str, Any], TypeError | None]:
    try:
        event_type, timeout = identifiers.validate_wait_options(options)
    except TypeError as exc:
        return {"op": "wait", "name": name, "argsError": protocol.safe_text(exc)}, exc
    return {"op": "wait", "name": name, "type": event_type, "timeoutSeconds": timeout}, None


def _validated_name(name: object) -> str:
    return identifiers.validate_scalar_string(name, what="step name")


class Step:
    """``step`` for a plain ``run``: every method blocks and returns the value (docs/spec/durable-workflow.md#dw-step)."""

    def __init__(self, context: Context) -> None:
        self._context = context

    def do(self, name: str, effect: Any, retry_policy: dict[str, Any] | None = None) -> Any:
        """Run ``effect`` once durably: its document (or ``None``); ``StepFailed`` when the policy is
        exhausted; ``TypeError`` for bad arguments of an uncompleted name."""
        context = self._context
        context.begin("do", name)
        try:
            step_name = _validated_name(name)
            result = context.ask_do(step_name, *_do_request(step_name, effect, retry_policy))
            if result is not _RUN_EFFECT:
                return result
            try:
                outcome = effect_result_message(step_name, value=effect())
            except BaseException as exc:  # noqa: BLE001 - whatever the effect raises fails the attempt
                outcome = effect_result_message(step_name, error=exc)
            return context.report_effect(step_name, outcome)
        finally:
            context.end()

    def sleep(self, name: str, seconds: int) -> None:
        """Sleep ``seconds`` (0..31536000; 0 completes in place). A future sleep never returns in
        this context: the parent kills the child and a later context continues."""
        return self._without_effect("sleep", "sleep", name, lambda step_name: _sleep_request(step_name, seconds))

    def wait_for_event(self, name: str, options: dict[str, Any]) -> Any:
        """Wait for an event ``{"type": t, "timeoutSeconds": s}``: its payload dict or ``None``;
        ``WaitTimeout`` after the timeout; ``TypeError`` for bad arguments of an uncompleted name."""
        return self._without_effect(
            "wait_for_event", "wait", name, lambda step_name: _wait_request(step_name, options)
        )

    def _without_effect(
        self, method: str, kind: str, name: str, build: Callable[[str], tuple[dict[str, Any], TypeError | None]]
    ) -> Any:
        """A step call that runs no effect here (sleep, wait_for_event): ``build(step_name)`` makes
        its request; the parent's answer settles it (a value, or the child is stopped)."""
        context = self._context
        context.begin(method, name)
        try:
            step_name = _validated_name(name)
            return context.ask_without_effect(kind, step_name, *build(step_name))
        finally:
            context.end()


class AsyncStep:
    """``step`` for an ``async def run``: methods return awaitables (coroutines).

    The name is validated when the method is called (``TypeError`` at once); the step counts as
    started from that call until its awaitable settles. Effects may be sync or async callables.
    Cancelling or closing an unsettled step is a ``mismatch`` (a step cannot be abandoned).
    """

    def __init__(self, context: Context) -> None:
        self._context = context

    def _start(self, kind: str, name: object) -> str:
        self._context.begin(kind, name)
        try:
            return _validated_name(name)
        except TypeError:
            self._context.end()
            raise

    def do(self, name: str, effect: Any, retry_policy: dict[str, Any] | None = None) -> Any:
        """Awaitable of ``Step.do``'s result (same rules)."""
        step_name = self._start("do", name)
        return self._do(step_name, effect, retry_policy)

    def sleep(self, name: str, seconds: int) -> Any:
        """Awaitable of ``Step.sleep`` (same rules)."""
        step_name = self._start("sleep", name)
        request, args_error = _sleep_request(step_name, seconds)
        return self._simple("sleep", step_name, request, args_error)

    def wait_for_event(self, name: str, options: dict[str, Any]) -> Any:
        """Awaitable of ``Step.wait_for_event``'s result (same rules)."""
        step_name = self._start("wait_for_event", name)
        request, args_error = _wait_request(step_name, options)
        return self._simple("wait", step_name, request, args_error)

    async def _simple(
        self, kind: str, name: str, request: dict[str, Any], args_error: TypeError | None
    ) -> Any:
        try:
            return self._context.ask_without_effect(kind, name, request, args_error)
        finally:
            self._context.end()

    async def _do(self, name: str, effect: Any, retry_policy: Any) -> Any:
        context = self._context
        try:
            result = context.ask_do(name, *_do_request(name, effect, retry_policy))
            if result is not _RUN_EFFECT:
                return result
            try:
                value = effect()
                if inspect.isawaitable(value):
                    value = await value
                outcome = effect_result_message(name, value=value)
            except (asyncio.CancelledError, GeneratorExit):
                context.mismatch(f"step.do({name!r}) was cancelled while its effect ran")
            except BaseException as exc:  # noqa: BLE001 - whatever the effect raises fails the attempt
                outcome = effect_result_message(name, error=exc)
            return context.report_effect(name, outcome)
        finally:
            context.end()
