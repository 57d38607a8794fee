"""One replay context: the parent side of the sandbox protocol, answered from Postgres (docs/spec/architecture.md#ar-shape,
§4; docs/spec/architecture.md#ar-context "One replay context, step by step"; the child side is ``takohost/runtime/PROTOCOL.md``).

``run_context(instance_pk)`` = take the lease → read the instance → pick ONE Version by weight
from the Worker's live Deployment and keep it → take the fencing token (epoch + 1) → load the
steps once → spawn a child with the job → answer its requests (``decide`` decides, ``store``
commits) → stop. Stopping is real (docs/spec/durable-workflow.md#dw-stop: "sleeping/waiting/terminalを公開する前にHostはコード
停止を確認し"): before ``sleeping``, ``waiting`` or a terminal status is committed, the child is
SIGKILLed and proven dead (``kill_and_wait``) and the lease released; a context whose commit is
fenced kills its child and stops without publishing anything.

Every message from the child is untrusted: shapes are checked by ``protocol.check_child_message``,
documents by ``canonical_document``, policies and seconds by the domain validators; a child that
breaks the protocol ends the instance ``errored``/``run_threw``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from core import config
from models import db as models_db
from models.base import utcnow
from models.errors import DomainError
from services import dispatch, instance_stop
from takohost.domain import commits, decide, history, replay_order
from takohost.runtime import parent, tracebacks
from workers import sandbox, tenant_logs
from workers.engine import observe, store
from workers.sandbox import children, heartbeat, jobs, receive
from workers.sandbox import lease as lease_mod
from workers.sandbox.session import Session

log = logging.getLogger(__name__)


#: The parent's answers to a step request (the frames that may carry the eager grant).
_STEP_ANSWERS = frozenset({"resolve", "raise", "reject_args", "run_effect"})


class _Stop(Exception):
    """Internal: the context is over (the reason is in ``outcome``)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


#: The child broke the protocol (it is untrusted: the instance ends ``run_threw``).
_Violation = receive.Violation
#: The child ran past ``settings.step_timeout_s`` (an attempt of ``step.do``, or code outside
#: steps between two step calls) without its next frame (docs/spec/host-limits.md#hl-decisions
#: "Attempt time limit").
_Overtime = receive.Overtime


#: The name of the attempt time limit's setting, as its errors name it.
STEP_TIMEOUT_SETTING = "TAKOHOST_STEP_TIMEOUT_SECONDS"


#: Re-exported for callers that pick a Version uid without loading it (tests of the weights).
pick_version = jobs.pick_version


class ReplayContext:
    """One execution of ``run`` for one instance. Use :func:`run_context`."""

    def __init__(
        self,
        *,
        instance_pk: int,
        settings: config.Settings,
        zygote: sandbox.Zygote,
        leases: lease_mod.LeaseStore,
        clock: Callable[[], dt.datetime] = utcnow,
        space: str | None = None,
    ) -> None:
        self.pk = instance_pk
        self.space = space  # whose per-Space cap this context counts against (None: uncapped)
        self.clock = clock
        self.settings = settings
        self.zygote = zygote
        self.leases = leases
        self.backend = store.backend_for(settings.database_url)
        self.heartbeat = heartbeat.heartbeat_for(
            leases=leases, url=settings.database_url, read_epochs=self.backend.read_epochs
        )
        #: The context's lease, child, pings, logs and stop proof (``workers.sandbox.session``).
        self.session = Session(leases=leases, beat=self.heartbeat, space=space)
        self.store: store.ContextStore | None = None
        self.snapshot: store.InstanceSnapshot | None = None
        self.version: jobs.VersionChoice | None = None
        self.steps: dict[str, decide.StepRecord] = {}
        self.used_child = False
        self.lease_taken = 0.0  # monotonic: just before the lease was acquired
        self.job_sent = 0.0  # monotonic: when the child got its job (its watchdog's first frame)
        self.replay: replay_order.ReplayOrder | None = None
        #: A step was not answered from the record: no later line of this context is a replay.
        self.replay_over = False
        self.eager_granted = False  # PROTOCOL.md "Eager first attempts"
        self.want_code = False  # PROTOCOL.md "Compiled modules": this context's job asked for them
        self.asking = ""  # the step name of the request being answered
        #: Monotonic deadline of the code the child runs outside steps (reset by every answer to a
        #: step call; ``None`` before the job is sent): ``settings.step_timeout_s`` after it.
        self.outside_deadline: float | None = None
        self.observer = observe.ContextObserver(instance_pk)  # metrics, trace, log fields

    @property
    def child(self) -> sandbox.ChildHandle | None:
        """The context's sandbox child (``None`` before the spawn and once it is stopped)."""
        return self.session.child

    @property
    def watched(self) -> heartbeat.Watched | None:
        """The context as the heartbeat watches it (from the token on)."""
        return self.session.watched

    @property
    def logs(self) -> tenant_logs.LogCollector | None:
        """The tenant's output of this context (docs/spec/host-features.md#hf-observability):
        tagged, budgeted, written in batches."""
        return self.session.logs

    # -- the whole context --------------------------------------------------------------------------
    def run(self) -> str:
        """Run the context; returns an outcome word for logs and tests (``complete``, ``errored``,
        ``sleeping``, ``waiting``, ``retry``, ``fenced``, ``busy``, ``not_runnable``, …)."""
        self.observer.begin()
        outcome, error = "failed", None
        try:
            outcome = self._run_admitted()
            return outcome
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.observer.end(outcome, error=error)

    def _run_admitted(self) -> str:
        self.lease_taken = time.monotonic()
        admitted = self.leases.admit(
            self.pk,
            space=self.space,
            cap=self.settings.space_max_contexts,
            reserved=self.settings.space_reserved_slots,
        )
        if not isinstance(admitted, lease_mod.Lease):
            return admitted  # "busy", or "deferred": the Space runs its cap of contexts (lease.py)
        self.session.lease = admitted
        try:
            return self._run()
        except _Stop as stop:
            return stop.outcome
        except store.Fenced:
            self._kill_child()
            return "fenced"
        except BaseException:
            log.exception("replay context failed", extra={"instance": self.pk})
            self._kill_child()
            self.backend.discard()
            raise
        finally:
            self._finish()
            if self.used_child:
                children.prespawn(self.zygote)

    def _finish(self) -> None:
        self._flush_logs()
        # Not proven: the session keeps the lease unreleased (its expiry, with the child's
        # watchdog, proves the stop).
        self.session.stop_child()
        self.session.release()

    def _run(self) -> str:
        snapshot = self.snapshot = self.backend.load_instance(self.pk)
        if snapshot is not None:
            self.session.space = snapshot.space
        if (
            snapshot is None
            or snapshot.status not in ("queued", "running")
            or snapshot.stopping is not None
            or snapshot.closed
            or not snapshot.workflow_live
        ):
            return "not_runnable"
        self.observer.instance_read(
            workflow_uid=snapshot.workflow_uid, space=snapshot.space, instance_id=snapshot.instance_id
        )
        lifetime_over = self.clock() >= snapshot.lifetime_ends_at
        choice = jobs.choose_version(snapshot.deployment_spec, load=self.backend.load_version)
        version = self.version = choice if isinstance(choice, jobs.VersionChoice) else None
        if version is None and not lifetime_over:
            assert isinstance(choice, jobs.NoVersion)
            log.warning(
                "no Version to run; left for the sweep",
                extra={"instance": self.pk, "problem": choice.problem},
            )
            return "no_version"
        self.store = self.observer.store(
            self.backend.context_store(pk=self.pk, lifetime_ends_at=snapshot.lifetime_ends_at)
        )
        if not lifetime_over:
            assert version is not None
            # The child imports the code while the token is taken (the fork and the import are the
            # slow part of a context). Safe: the lease keeps other contexts of this instance out,
            # no step request is answered before the token is ours, and a refused start kills the
            # child before the lease is released — only code outside steps (deterministic and
            # side-effect free by docs/spec/durable-workflow.md#dw-replay) may have run.
            self.used_child = True
            # Before the job is sent: the host's log budget starts before the child's own.
            self.session.logs = tenant_logs.LogCollector(
                connection=lambda: models_db.connection_for(self.settings.database_url), instance_pk=self.pk
            )
            with self.observer.spawn():
                self.session.attach(children.take_child(self.zygote, self._job(snapshot, version), space=snapshot.space))
            self.job_sent = time.monotonic()
            self.outside_deadline = self.job_sent + self.settings.step_timeout_s
        # The lifetime ends the instance even when no Version can run it (no code runs for that).
        if not self.store.start(version_uid=None if version is None else version.uid, now=self.clock()):
            return "not_runnable"
        self.observer.token_taken(epoch=self.store.epoch, version_uid=None if version is None else version.uid)
        if self.logs is not None:
            self.logs.epoch = self.store.epoch
        assert self.session.lease is not None
        self.session.watch(heartbeat.Watched(
            instance_pk=self.pk,
            epoch=self.store.epoch,
            lease=self.session.lease,
            child=self.child,
            renewed_at=self.lease_taken,
            last_ping=self.job_sent or time.monotonic(),
        ))
        self.observer.watched = self.watched  # it publishes the running step for …/progress
        if lifetime_over:
            return self._end_errored(
                "lifetime_exceeded", "the instance reached its lifetime of 31536000 seconds"
            )
        self.steps = self.store.load_steps() if snapshot.status != "queued" else {}
        self.replay = replay_order.ReplayOrder(list(self.steps))
        self._note_replaying()
        self.observer.steps_loaded(self.steps, now=self.clock())
        return self._serve()

    def _job(self, snapshot: store.InstanceSnapshot, version: jobs.VersionChoice) -> dict:
        event: dict[str, Any] = {"instanceId": snapshot.instance_id}
        if snapshot.params is not None:
            event["params"] = snapshot.params
        # PROTOCOL.md "Compiled modules": send what an earlier child of this Version compiled, or
        # ask this child for it.
        cached = jobs.caches_code(version)
        code = jobs.code_for(version.uid) if cached else None
        self.want_code = cached and code is None
        return jobs.job_message(
            kind="workflow",
            version=version,
            event=event,
            class_name=snapshot.workflow_spec["className"],
            watchdog_seconds=jobs.watchdog_seconds(self.leases.ttl_ms),
            code=code,
            want_code=self.want_code,
        )

    def _code(self, message: dict) -> None:
        """A ``code`` frame: once, only when this context asked, only as the child's first frame,
        only for the Version's modules."""
        if not self.want_code:
            raise _Violation("a code frame the host did not ask for")
        self.want_code = False
        assert self.version is not None
        modules = self.version.spec.get("modules") or {}
        if any(path not in modules for path in message["modules"]):
            raise _Violation("a code frame for a module that is not the Version's")
        jobs.remember_code(self.version.uid, message["modules"])

    # -- the message loop --------------------------------------------------------------------------
    def _recv(self, deadline: float | None = None) -> dict:
        """The child's next message but ``log`` frames, which go to :attr:`logs`, and its ``code``
        frame (:meth:`_intercept`): ``receive.receive``, the loop every tenant run shares.

        ``deadline`` (monotonic seconds; default :attr:`outside_deadline`): no frame but logs by
        then raises :class:`_Overtime` (the attempt time limit)."""
        try:
            return self.session.receive(
                deadline=self.outside_deadline if deadline is None else deadline, intercept=self._intercept
            )
        except sandbox.ChildGone:
            self._explain_gone()
            raise

    def _intercept(self, message: dict) -> bool:
        """Consume a ``code`` frame (:meth:`_code`). The child sends it before any of the
        Version's code runs: one that comes after any other frame is tenant code's (PROTOCOL.md
        "Compiled modules"), so every other frame ends the wait for it."""
        if message["op"] == "code":
            self._code(message)
            return True
        self.want_code = False
        return False

    def _flush_logs(self) -> None:
        if self.logs is not None:
            self.logs.flush()

    def _note_replaying(self) -> None:
        """Tenant lines outside effects are ``replayed`` while the child is asking again for the
        steps the history recorded, each answered from its record: what it prints until then
        (module code, ``run`` up to its last recorded step) an earlier context printed too. It ends
        at the last recorded step, or earlier at the first step not answered from the record (a
        divergence: the code took another way). Exact in time: the child flushes its lines before
        each step frame."""
        if self.logs is not None and self.replay is not None:
            self.logs.replaying = self.replay.unvisited > 0 and not self.replay_over

    def _host_log(self, text: str, **tags: object) -> None:
        if self.logs is not None:
            self.logs.host_line(text, **tags)

    def _diverged(self, divergence: replay_order.Divergence | None) -> None:
        """Record a replay divergence (history ``ReplayDiverged`` and a host log line); a
        diagnostic only (``replay_order``). Raises :class:`store.Fenced`."""
        if divergence is None:
            return
        assert self.store is not None
        self.store.apply(commits.Commit(events=[history.replay_diverged(divergence.attributes())]), now=self.clock())
        self._host_log(f"replay diverged ({divergence.kind}): {divergence.message}", step=divergence.step, attempt=None)

    def _explain_gone(self) -> None:
        """The child vanished: fenced or lease lost (the heartbeat killed it) → stop quietly; its
        pings were withheld long enough for its watchdog to fire (this host was too slow to renew
        the lease, or starved) → not the code's doing: record nothing, let a fresh context run."""
        watched = self.watched
        if watched is None:
            return
        if watched.fenced or watched.lost:
            raise _Stop("fenced" if watched.fenced else "lease_lost")
        watchdog = heartbeat.watchdog_seconds(self.leases.ttl_ms)
        if watched.ping_gap() >= heartbeat.WATCHDOG_SUSPECT * watchdog:
            if self._fenced_meanwhile():  # e.g. this process was frozen and another owner took over
                raise _Stop("fenced")
            log.warning(
                "sandbox child lost to its watchdog; a fresh context takes over", extra={"instance": self.pk}
            )
            self._stop_child()
            dispatch.run_context(self.pk)
            raise _Stop("restart")

    def _serve(self) -> str:
        try:
            while True:
                message = self._recv()
                op = message["op"]
                if op in ("do", "sleep", "wait"):
                    self._step(message)
                elif op == "binding":
                    self._binding(message)
                elif op == "run_returned":
                    if self.replay is not None:
                        self._diverged(self.replay.at_end())
                    return self._returned(message["output"])
                elif op == "run_failed":
                    if self.replay is not None and message["phase"] == "run":
                        self._diverged(self.replay.at_end())
                    reason, text = self._failure(message)
                    return self._end_errored(reason, text, frames=tracebacks.clean_frames(message.get("traceback")))
                elif op == "mismatch":
                    return self._end_errored("step_definition_mismatch", message["message"])
                else:
                    raise _Violation(f"unexpected message {op!r}")
        except _Violation as exc:
            log.warning("sandbox child broke the protocol", extra={"instance": self.pk, "error": str(exc)})
            return self._end_errored("run_threw", f"the workflow process broke the host protocol: {exc}")
        except sandbox.ChildGone:
            return self._end_errored(
                "run_threw", "the workflow process exited without a result (os._exit or a crash)"
            )
        except _Overtime:
            # Code outside steps is deterministic (docs/spec/durable-workflow.md): a fresh context would run as long.
            limit = self.settings.step_timeout_s
            log.warning("code outside steps ran past the limit", extra={"instance": self.pk, "seconds": limit})
            return self._end_errored(
                "run_threw",
                f"StepTimeout: code outside steps ran past {STEP_TIMEOUT_SETTING}={limit:g} "
                "without calling a step",
            )

    def _fenced_meanwhile(self) -> bool:
        try:
            return self.store is not None and self.store.is_fenced()
        except Exception:  # noqa: BLE001 - cannot tell: a fresh context decides (its start is fenced too)
            log.warning("could not read the epoch", extra={"instance": self.pk}, exc_info=True)
            return False

    def _failure(self, message: dict) -> tuple[str, str]:
        """``(reason, message)`` of a ``run_failed`` (``parent.run_failure``)."""
        return parent.run_failure(message, self.steps)

    def _send(self, message: dict) -> None:
        """Send a frame to the child; the first answer to a step once replay has asked for every
        recorded step again carries the eager grant (:meth:`_eager_grant`)."""
        assert self.child is not None
        if not self.eager_granted and message["op"] in _STEP_ANSWERS:
            grant = self._eager_grant()
            if grant is not None:
                message = {**message, "eager": grant}
                self.eager_granted = True
        if message["op"] in _STEP_ANSWERS and message["op"] != "run_effect":
            # The child's code outside steps runs again from here, until its next step call.
            self.outside_deadline = time.monotonic() + self.settings.step_timeout_s
        try:
            self.child.send(message)
        except sandbox.ChildGone:
            self._explain_gone()
            raise

    def _eager_grant(self) -> dict | None:
        """PROTOCOL.md "Eager first attempts": ``{"steps", "until"}`` once every recorded step was
        asked for again in this context (a name the child has not asked for is then surely new),
        or ``None``. ``steps``: names the instance may still add after the step being answered
        (the 1024 limit); ``until``: its lifetime end in UTC epoch milliseconds. The child then
        runs a new ``do``'s first attempt without waiting for ``run_effect``: one round trip less
        per step."""
        if self.replay is None or self.replay.unvisited or self.snapshot is None:
            return None
        # New names the child may still ask for after the one this frame answers.
        steps = decide.MAX_STEPS - len(self.steps) - (self.asking not in self.steps)
        if steps <= 0:
            return None
        return {"steps": steps, "until": int(self.snapshot.lifetime_ends_at.timestamp() * 1000)}

    # -- steps --------------------------------------------------------------------------------------
    def _request(self, message: dict) -> decide.Request:
        try:
            return parent.step_request(message)
        except parent.ProtocolViolation as exc:
            raise _Violation(str(exc)) from None

    def _step(self, message: dict) -> None:
        request = self._request(message)
        self.asking = request.name
        assert self.snapshot is not None
        if self.replay is not None:
            self._diverged(self.replay.visit(request.name))
        decision = decide.decide(
            request,
            self.steps.get(request.name),
            now=self.clock(),
            known_steps=len(self.steps),
            lifetime_ends_at=self.snapshot.lifetime_ends_at,
        )
        if message.get("eager") is True or not isinstance(decision, decide.Resolve | decide.Raise):
            self.replay_over = True  # a step not answered from the record: this code runs anew
        self._note_replaying()
        answer = parent.recorded_answer(decision)
        if message.get("eager") is True:
            self._eager(request.name, decision)
        elif answer is not None:
            self._send(answer)
        elif isinstance(decision, decide.EndInstance):
            raise _Stop(self._end_errored(decision.reason, decision.message))
        elif isinstance(decision, decide.RunEffect):
            self._run_effect(request.name, decision)
        elif isinstance(decision, decide.CompleteSleep):
            self._complete_sleep(request, decision)
        elif isinstance(decision, decide.Suspend):
            self._stop_child()
            assert self.store is not None
            self.store.commit_suspend(
                suspend=decision, name=request.name, seconds=request.seconds, now=self.clock()
            )
            raise _Stop("sleeping" if decision.kind == "sleep" else "retry")
        else:
            assert isinstance(decision, decide.TryWait)
            self._wait(request.name, decision)

    def _eager(self, name: str, decision: decide.Decision) -> None:
        """A ``do`` whose first attempt the child runs without waiting (its ``effect_result``
        follows): only under the grant, and only for a new step; the lifetime or step limit
        still ends the instance first (the effect's result is then never used)."""
        if not self.eager_granted:
            raise _Violation("an eager step.do before the host granted eager first attempts")
        if isinstance(decision, decide.RunEffect) and decision.new and decision.attempt == 1:
            self._run_effect(name, decision, eager=True)
        elif isinstance(decision, decide.EndInstance):
            raise _Stop(self._end_errored(decision.reason, decision.message))
        else:
            raise _Violation(f"an eager step.do of {name!r}, which is not a new step")

    def _run_effect(self, name: str, decision: decide.RunEffect, *, eager: bool = False) -> None:
        assert self.store is not None
        started_at = self.clock()
        self.observer.attempt_started(name, decision.attempt)
        if self.logs is not None:  # the host's own tag of what the child prints from now on
            self.logs.step, self.logs.attempt = name, decision.attempt
        if not eager:  # an eager child already runs it
            self._send({"op": "run_effect", "attempt": decision.attempt})
        deadline = time.monotonic() + self.settings.step_timeout_s
        died = False
        while True:
            try:
                message = self._recv(deadline)
            except _Overtime:  # past the attempt time limit: the child is killed below, then recorded
                died = True
                limit = self.settings.step_timeout_s
                log.warning(
                    "step attempt ran past the limit",
                    extra={"instance": self.pk, "step": name, "attempt": decision.attempt, "seconds": limit},
                )
                outcome = decide.decide_outcome(
                    attempt=decision.attempt,
                    policy=decision.policy,
                    ok=False,
                    now=self.clock(),
                    error={
                        "type": "StepTimeout",
                        "message": f"step {name!r} attempt {decision.attempt} exceeded "
                        f"{STEP_TIMEOUT_SETTING}={limit:g}",
                    },
                )
                break
            except sandbox.ChildGone:  # the effect took its process down: a failed attempt
                died = True
                outcome = parent.died_outcome(decision, now=self.clock())
                break
            if message["op"] == "binding":
                self._binding(message)
                continue
            if message["op"] == "mismatch":  # a step method called from inside the effect
                raise _Stop(self._end_errored("step_definition_mismatch", message["message"]))
            if message["op"] != "effect_result" or message["name"] != name:
                raise _Violation(f"expected the effect_result of {name!r}, got {message['op']!r}")
            outcome = self._outcome(message, decision)
            break
        self._log_attempt(name, decision.attempt, outcome)
        retrying = isinstance(outcome, decide.AttemptFailedRetry)
        if retrying or died:
            # Each attempt runs in a fresh context (even with delay 0, docs/spec/durable-workflow.md#dw-step-do):
            # the child goes first, then the attempt's outcome is committed.
            self._stop_child()
        self.store.commit_attempt(
            name=name, run=decision, started_at=started_at, outcome=outcome, now=self.clock()
        )
        self.observer.attempt_done(outcome)
        if isinstance(outcome, decide.AttemptFailedRetry):
            if outcome.delay == 0:  # no timer row: dispatch the fresh context now
                dispatch.run_context(self.pk)
            raise _Stop("retry")
        if (
            died
        ):  # the last attempt died with its process: step_failed is recorded, a fresh context replays it
            dispatch.run_context(self.pk)
            raise _Stop("restart")
        assert isinstance(outcome, decide.AttemptSucceeded | decide.AttemptFailedFinal)
        self.steps[name] = parent.record_after_attempt(name, decision=decision, outcome=outcome)
        self._send(parent.settled_answer(outcome))

    def _log_attempt(self, name: str, attempt: int, outcome: decide.Outcome) -> None:
        """A failed attempt's error and traceback as a host log line; the tag ends here."""
        if self.logs is None:
            return
        if not isinstance(outcome, decide.AttemptSucceeded):
            error = outcome.error
            text = f"attempt {attempt} of step {name!r} failed: {error.get('type', 'Error')}: {error.get('message', '')}"
            if error.get("traceback"):
                text += "\nTraceback (the Version's frames, innermost last):\n" + tracebacks.format_frames(error["traceback"])
            self.logs.host_line(text)
        self.logs.step, self.logs.attempt = None, None

    def _outcome(self, message: dict, decision: decide.RunEffect) -> decide.Outcome:
        """The attempt's outcome from the child's ``effect_result`` (``parent.attempt_outcome``)."""
        return parent.attempt_outcome(message, decision=decision, now=self.clock())

    def _complete_sleep(self, request: decide.Request, decision: decide.CompleteSleep) -> None:
        assert self.store is not None
        self.store.commit_sleep_completed(
            name=request.name,
            seconds=request.seconds,
            wake_at=decision.wake_at,
            new=decision.new,
            now=self.clock(),
        )
        self.steps[request.name] = decide.StepRecord(
            name=request.name, kind="sleep", state="succeeded", wake_at=decision.wake_at
        )
        self._send({"op": "resolve", "result": None})

    def _wait(self, name: str, decision: decide.TryWait) -> None:
        assert self.store is not None
        result, payload = self.store.try_wait(name=name, wait=decision, now=self.clock())
        if result == "consumed":
            self.steps[name] = decide.StepRecord(name=name, kind="wait", state="succeeded", result=payload)
            self._send({"op": "resolve", "result": payload})
            return
        if result == "timed_out":
            message = parent.wait_timeout_message(decision)
            self.steps[name] = decide.StepRecord(
                name=name, kind="wait", state="failed", error={"message": message}
            )
            self._send({"op": "raise", "error": "wait_timeout", "message": message})
            return
        self._stop_child()
        if self.store.commit_wait_suspend(name=name, wait=decision, now=self.clock()):
            dispatch.run_context(self.pk)
            raise _Stop("restart")
        raise _Stop("waiting")

    # -- bindings -----------------------------------------------------------------------------------
    def _binding(self, message: dict) -> None:
        assert self.version is not None and self.snapshot is not None
        # Calling ``terminate`` on the own instance stops the own child first (no line runs after).
        target = self.version.bindings.get(message["binding"])
        call, args = message["call"], message["args"]
        if (
            call == "terminate"
            and target is not None
            and target == self.snapshot.workflow_uid
            and args.get("id") == self.snapshot.instance_id
        ):
            self._terminate_self()
        try:
            answer = jobs.answer_binding(
                message, space=self.snapshot.space, bindings=self.version.bindings
            )
        except jobs.UnknownBinding as exc:
            raise _Violation(str(exc)) from None
        self._send(answer)

    def _terminate_self(self) -> None:
        """``inst.terminate()`` on the own instance: stop the own child first, then terminate."""
        assert self.snapshot is not None
        self._stop_child()
        try:
            instance_stop.terminate(
                space=self.snapshot.space,
                workflow_uid=self.snapshot.workflow_uid,
                instance_id=self.snapshot.instance_id,
            )
        except DomainError:  # fenced and stopped already; the sweep publishes ``terminated``
            log.warning("self-terminate left to the sweep", extra={"instance": self.pk}, exc_info=True)
        raise _Stop("terminated")

    # -- ends -----------------------------------------------------------------------------------------
    def _returned(self, output: object) -> str:
        problem = parent.output_problem(output)
        if problem is not None:
            return self._end_errored("run_threw", problem)
        self._stop_child(release=False)
        assert self.store is not None
        self.store.commit_terminal(status="complete", output=output, now=self.clock())  # type: ignore[arg-type]
        return "complete"

    def _end_errored(self, reason: str, message: str, *, frames: list[dict] | None = None) -> str:
        """Publish ``errored`` with ``{"reason", "message"?}`` (the spec's shape, docs/spec/durable-workflow.md#dw-status); ``frames`` (the
        tenant's traceback of a ``run_threw``) go to the history event and the logs only."""
        self._host_log(
            f"instance errored: {reason}: {message}"
            + ("\nTraceback (the Version's frames, innermost last):\n" + tracebacks.format_frames(frames) if frames else ""),
            step=None,
            attempt=None,
        )
        self._stop_child(release=False)
        assert self.store is not None
        error = parent.errored_error(reason, message)
        details = {"traceback": frames} if frames else None
        self.store.commit_terminal(status="errored", error=error, now=self.clock(), details=details)
        return "errored"

    def _stop_child(self, *, release: bool = True) -> None:
        """Kill the child and prove it dead, then drop the lease (nothing of ours runs any more).
        Not proven → stop without publishing (the lease expires; the child's watchdog fires).

        ``release=False`` keeps the lease until :meth:`_finish`, after the caller's commit: for a
        terminal status, which no later context of the instance waits for, so that the lease's
        round trip is not between the proof and the status a client sees. Before ``sleeping``,
        ``waiting`` or a retry the lease must be gone first: the wake-up may come at once."""
        if not self.session.stop_child():
            raise _Stop("stop_unproven")
        self._flush_logs()  # before the status is published: a follower sees the last lines first
        if release:
            self.session.release()

    def _kill_child(self) -> None:
        """Stop the child at once (fenced, or the context failed); the lease is released by
        :meth:`_finish` (not proven: left to expire)."""
        self.session.stop_child()


def run_context(
    instance_pk: int,
    *,
    settings: config.Settings | None = None,
    zygote: sandbox.Zygote | None = None,
    clock: Callable[[], dt.datetime] = utcnow,
    space: str | None = None,
) -> str:
    """Run one replay context of instance ``instance_pk`` (the body of the Celery task
    ``takohost.run_context``); returns the outcome word. Lease busy → ``"busy"`` at once.
    ``clock`` (aware UTC) is the context's notion of now (tests pass a controllable one).
    ``space`` (the instance's Space) puts the context under ``settings.space_max_contexts``:
    that Space at its cap → ``"deferred"`` at once (``lease.LeaseStore.admit``)."""
    settings = settings or config.load_settings()
    leases = lease_mod.store_for_settings(settings)
    started = time.perf_counter()
    context = ReplayContext(
        instance_pk=instance_pk,
        settings=settings,
        zygote=zygote or sandbox.get_zygote(),
        leases=leases,
        clock=clock,
        space=space,
    )
    outcome = context.run()
    log.debug(
        "context done",
        extra={
            "instance": instance_pk,
            "outcome": outcome,
            "seconds": round(time.perf_counter() - started, 4),
        },
    )
    return outcome
