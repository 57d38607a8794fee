"""The three jobs of a child (``validate``, ``workflow``, ``scheduled``; PROTOCOL.md): run one,
end the child with its final message (:func:`run_job`); and the warm-up the zygote runs once so
that every child starts with these code paths already specialised (:func:`warm_up`).

Standard library and ``takohost`` only: this runs user code.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import traceback
from typing import Any, NoReturn

from takohost.domain import documents, egress
from takohost.runtime import bindings, capture, egress_hook, protocol, step, tracebacks
from takohost.runtime.child import channel as channel_module
from takohost.runtime.child import hygiene, importer

__all__ = [
    "ScheduledContext",
    "import_failed",
    "is_workflow_class",
    "last_traceback_line",
    "run_job",
    "run_workflow",
    "warm_up",
]


_WARM_UP_MODULE = "_takohost_warm_up"
_WARM_UP_SOURCE = """
class Warm:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        first = step.do("s0", lambda: {"n": 0})
        for i in range(1, 3):
            step.do(f"s{i}", lambda: {"n": i})
        return {"first": first, "event": event}
"""


class _WarmUpChannel:
    """A channel answering like a parent would (``run_effect`` then ``resolve``), in memory."""

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        protocol.FrameBuffer().feed(protocol.encode_frame(message))
        if message["op"] == "do":
            reply: dict[str, Any] = {"op": "run_effect", "attempt": 1}
        else:
            reply = {"op": "resolve", "result": message.get("result")}
        return protocol.FrameBuffer().feed(protocol.encode_frame(reply))[0]

    def send(self, message: dict[str, Any]) -> None:
        raise RuntimeError("no eager message in the warm-up")

    def final(self, message: dict[str, Any]) -> NoReturn:
        raise RuntimeError("no final message in the warm-up")

    def fatal(self, message: str) -> NoReturn:
        raise RuntimeError(message)


def warm_up(rounds: int = 16) -> None:
    """Run the runtime's per-context code paths ``rounds`` times in this process, with a module of
    its own (no user code, nothing left behind: the warm-up module and its finder are removed).

    Called once in the zygote before it freezes its heap, so every forked child starts with this
    code already quickened and specialised instead of warming it up again in each context. Only
    the interpreter's caches are shared this way; no module state of a Version ever exists in the
    zygote.
    """
    channel = _WarmUpChannel()
    job = {
        "op": "job",
        "kind": "workflow",
        "modules": {f"{_WARM_UP_MODULE}.py": _WARM_UP_SOURCE},
        "mainModule": f"{_WARM_UP_MODULE}.py",
        "className": "Warm",
        "vars": {"A": {"b": [1, 2.5, "c", None, True]}},
        "bindings": [],
        "event": {"instanceId": "warm-up"},
        "watchdogSeconds": 10.0,
    }
    saved_meta_path = list(sys.meta_path)
    try:
        for _ in range(rounds):
            received = protocol.FrameBuffer().feed(protocol.encode_frame(job))[0]
            module = importer.import_main(received)
            env = bindings.make_env(variables=received["vars"], bindings=[], channel=channel)
            value = module.Warm(env).run(received["event"], step.Step(step.Context(channel)))
            documents.canonical_document(value, allow_none=True)
            protocol.encode_frame({"op": "run_returned", "output": value})
            sys.meta_path[:] = saved_meta_path
            sys.modules.pop(_WARM_UP_MODULE, None)
    finally:
        sys.meta_path[:] = saved_meta_path
        sys.modules.pop(_WARM_UP_MODULE, None)


def last_traceback_line(exc: BaseException) -> str:
    """The last line of ``exc``'s formatted traceback (docs/spec/worker-forms.md#wf-version import errors), followed by
    the Version file and line where it happened when that is one of the Version's modules:
    ``"NameError: name 'x' is not defined (main.py, line 3)"``."""
    try:
        lines = "".join(traceback.format_exception(exc)).strip().splitlines()
        text = lines[-1] if lines else step.exception_text(exc)
    except BaseException:  # noqa: BLE001 - a user __str__ may raise
        text = step.exception_text(exc)
    where = tracebacks.location(tracebacks.tenant_frames(exc))
    if where is not None and not text.endswith(f"({where})"):
        text = f"{text} ({where})"
    return protocol.safe_text(text)


def run_job(job: dict[str, Any], channel: channel_module.Channel, *, sink: capture.Sink | None = None) -> NoReturn:
    """Run one job and end the child with its final message. ``sink`` is the muted output capture
    installed while the child waited (``None``: installed here when the job captures)."""
    kind = job.get("kind")
    if kind in ("workflow", "scheduled"):
        if sink is None:
            sink = capture.install()
        sink.arm(channel._write)
        channel.capture = sink
    elif sink is not None:
        sink.discard()
    _egress(job.get("egress"))
    if kind == "validate":
        _run_validate(job, channel)
    elif kind == "workflow":
        _run_workflow(job, channel)
    elif kind == "scheduled":
        _run_scheduled(job, channel)
    hygiene.die()


def _egress(part: object) -> None:
    """With public egress, wrap ``socket`` so that a refused connection fails at once with the
    reason (``egress_hook``; the host's proxy enforces the same rules whatever the code does). A
    malformed part (the host's own job: never) is ignored: only the messages would be worse."""
    if type(part) is not dict:
        return
    try:
        egress_hook.install(
            rules=egress.SpaceRules.from_json(part["rules"]),
            listen_ports=tuple(int(p) for p in part["listenPorts"]),
            test_public=tuple(str(c) for c in part.get("testPublic", ())),
        )
    except (KeyError, TypeError, ValueError):
        pass


def _run_validate(job: dict[str, Any], channel: channel_module.Channel) -> NoReturn:
    try:
        module = importer.import_main(job)
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import is an import error too
        channel.final({"op": "import_error", "message": last_traceback_line(exc)})
    classes = []
    for name, value in list(vars(module).items()):
        try:
            if is_workflow_class(value):
                classes.append(name)
        except BaseException:  # noqa: BLE001 - a metaclass may raise anything
            continue
    try:
        handlers = ["scheduled"] if callable(getattr(module, "scheduled", None)) else []
    except BaseException:  # noqa: BLE001
        handlers = []
    channel.final({"op": "validated", "workflowClasses": sorted(classes), "handlers": handlers})


def is_workflow_class(value: object) -> bool:
    """docs/spec/durable-workflow.md#dw-abi: a class, constructible with one argument (as far as its signature tells),
    whose ``run`` is callable."""
    if not isinstance(value, type) or not callable(getattr(value, "run", None)):
        return False
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return True  # no introspectable signature: constructing will tell
    try:
        signature.bind(None)
    except TypeError:
        return False
    return True


def _run_failed(
    channel: step.Channel,
    *,
    phase: str,
    exc: BaseException | None = None,
    message: str = "",
    frames_of: BaseException | None = None,
) -> NoReturn:
    text = step.exception_text(exc) if exc is not None else message
    final: dict[str, Any] = {"op": "run_failed", "reason": "run_threw", "message": text, "phase": phase}
    cause = exc or frames_of
    frames = tracebacks.tenant_frames(cause) if cause is not None else []
    if frames:
        final["traceback"] = frames
    channel.final(final)


def _send_code(channel: channel_module.Channel, finder: importer.SourceModules) -> None:
    """The ``code`` frame, before any of the Version's code runs (PROTOCOL.md "Compiled
    modules"): the parent keeps it for this Version's next contexts."""
    frame = finder.code_frame(limit=protocol.CODE_MAX_CHARS)
    if frame is not None:
        channel.send(frame)


def _run_workflow(job: dict[str, Any], channel: channel_module.Channel) -> NoReturn:
    send_code = (lambda finder: _send_code(channel, finder)) if job.get("wantCode") is True else None
    try:
        module, _ = importer.import_version(job, compiled=send_code)
    except BaseException as exc:  # noqa: BLE001
        import_failed(channel, exc)
    run_workflow(module, job, channel)


def import_failed(channel: step.Channel, exc: BaseException) -> NoReturn:
    """End the run: importing the Version's main module raised ``exc`` (``run_failed``, phase
    ``import``)."""
    _run_failed(channel, phase="import", message=last_traceback_line(exc), frames_of=exc)


def run_workflow(module: Any, job: dict[str, Any], channel: step.Channel) -> NoReturn:
    """Construct ``job["className"]`` of the imported main ``module`` with ``env``, run it
    (``run(event, step)``, plain or ``async``) and end with its final message: ``run_returned``,
    ``run_failed`` or ``mismatch`` (docs/spec/durable-workflow.md#dw-abi, docs/spec/worker-forms.md#wf-errors). The sandbox child calls it after its
    import; ``takohost.testing`` calls it in process with a channel of its own."""
    class_name = job.get("className")
    cls = getattr(module, class_name, None) if type(class_name) is str else None
    if not isinstance(cls, type) or not callable(getattr(cls, "run", None)):
        _run_failed(
            channel,
            phase="construct",
            message=f"no workflow class {protocol.safe_text(class_name)!r} in the main module",
        )
    env = bindings.make_env(
        variables=job.get("vars") or {}, bindings=job.get("bindings") or [], channel=channel
    )
    try:
        instance = cls(env)
        run = instance.run
    except BaseException as exc:  # noqa: BLE001
        _run_failed(channel, phase="construct", exc=exc)
    context = step.Context(channel)
    event = job.get("event") or {}
    if inspect.iscoroutinefunction(run):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(_drive_async(run, event, step.AsyncStep(context), context))
        hygiene.die()  # _drive_async never returns normally
    try:
        value = run(event, step.Step(context))
    except BaseException as exc:  # noqa: BLE001
        _finish_run(context, raised=exc)
    _finish_run(context, value=value)


async def _drive_async(
    run: Any, event: dict[str, Any], step_object: step.AsyncStep, context: step.Context
) -> None:
    # The run is awaited directly (not as a task) and finished inside this coroutine, so no other
    # task of the loop gets a turn between run settling and the child's final message.
    try:
        value = await run(event, step_object)
    except BaseException as exc:  # noqa: BLE001
        _finish_run(context, raised=exc)
    _finish_run(context, value=value)


def _finish_run(
    context: step.Context, *, value: object = None, raised: BaseException | None = None
) -> NoReturn:
    """Send ``run_returned`` / ``run_failed`` (or ``mismatch`` if a step is unsettled), then die."""
    unsettled = context.unsettled()
    if unsettled is not None:
        context.mismatch(f"run settled while {unsettled} was unsettled")
    channel = context.channel
    if raised is not None:
        genuine = context.genuine_step_failed(raised)
        if genuine is not None:
            message, step_name = genuine
            channel.final(
                {
                    "op": "run_failed",
                    "reason": "step_failed",
                    "message": message,
                    "phase": "run",
                    "step": step_name,
                }
            )
        _run_failed(channel, phase="run", exc=raised)
    if inspect.isawaitable(value):
        channel.final(
            {
                "op": "run_failed",
                "reason": "run_threw",
                "phase": "run",
                "message": "TypeError: run returned an awaitable; declare it with async def",
            }
        )
    try:
        documents.canonical_document(value, allow_none=True)
    except (documents.InvalidDocument, documents.DocumentTooLargeError) as exc:
        channel.final(
            {
                "op": "run_failed",
                "reason": "run_threw",
                "phase": "run",
                "message": protocol.safe_text(
                    f"{type(exc).__name__}: run returned a value that is not a document: {exc}"
                ),
            }
        )
    channel.final({"op": "run_returned", "output": value})


class ScheduledContext:
    """``ctx`` of ``scheduled(event, env, ctx)`` (docs/spec/cron-trigger.md#cr-handler).

    ``wait_until(work)``: ``work`` is an awaitable (started now as a task when a loop runs) or a
    callable (called after the handler returns; an awaitable result is awaited). The delivery
    finishes when all of them have; any failure makes the delivery ``failed``.
    """

    def __init__(self) -> None:
        self._work: list[Any] = []

    def wait_until(self, work: Any) -> None:
        """Keep the delivery open until ``work`` finishes; ``TypeError`` for anything else."""
        if inspect.isawaitable(work):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # a plain handler: no loop runs yet, the awaitable is awaited after it
            else:
                work = asyncio.ensure_future(work)
            self._work.append(work)
        elif callable(work):
            self._work.append(work)
        else:
            raise TypeError(f"wait_until takes an awaitable or a callable, not {type(work).__name__}")

    async def drain(self, failures: list[BaseException]) -> None:
        """Finish every registered piece of work (including work registered meanwhile)."""
        index = 0
        while index < len(self._work):
            work = self._work[index]
            index += 1
            try:
                result = work if inspect.isawaitable(work) else work()
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)


def _run_scheduled(job: dict[str, Any], channel: channel_module.Channel) -> NoReturn:
    try:
        module = importer.import_main(job)
        handler = getattr(module, "scheduled", None)
    except BaseException as exc:  # noqa: BLE001
        done = {"op": "scheduled_done", "ok": False, "message": last_traceback_line(exc)}
        frames = tracebacks.tenant_frames(exc)
        if frames:
            done["traceback"] = frames
        channel.final(done)
    if not callable(handler):
        channel.final(
            {"op": "scheduled_done", "ok": False, "message": "the main module has no callable scheduled"}
        )
    env = bindings.make_env(
        variables=job.get("vars") or {}, bindings=job.get("bindings") or [], channel=channel
    )
    event = job.get("event") or {}
    ctx = ScheduledContext()
    failures: list[BaseException] = []
    pending: Any = None
    if not inspect.iscoroutinefunction(handler):
        # A plain handler runs outside any event loop (it may use asyncio.run itself).
        try:
            pending = handler(event, env, ctx)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    async def deliver() -> NoReturn:
        try:
            result = handler(event, env, ctx) if inspect.iscoroutinefunction(handler) else pending
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        await ctx.drain(failures)
        if failures:
            text = step.exception_text(failures[0])
            if len(failures) > 1:
                text = f"{text} (and {len(failures) - 1} more failure(s))"
            done: dict[str, Any] = {"op": "scheduled_done", "ok": False, "message": protocol.safe_text(text)}
            frames = tracebacks.tenant_frames(failures[0])
            if frames:
                done["traceback"] = frames
            channel.final(done)
        channel.final({"op": "scheduled_done", "ok": True})

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(deliver())
    hygiene.die()
