"""Replay a created WorkerVersion, in the sandbox, against one instance's recorded history (docs/spec/host-features.md#hf-testing
item 3: the host's side of ``takohost versions check``; docs/testing.md).

:func:`check_history` starts a sandbox child with the Version's ``workflow`` job — the same job a
replay context sends, for the instance's id and params — and answers it from the history with
``takohost.runtime.replay_check.Replay`` (the comparison ``takohost.testing.replay`` makes in
process): every recorded step replays its outcome, the first step without a recorded result
ends the replay; no effect runs, no event is read, nothing is written. The child is killed and
proven dead afterwards. Bounded: ``time_limit`` seconds in all, the child's watchdog besides.

:func:`run_operation` is the reconcile of a ``check`` Operation (``services.replay_checks``): it
replays the Version against every instance the check covers, each within
``TAKOHOST_REPLAY_CHECK_INSTANCE_TIMEOUT_S`` and all within ``TAKOHOST_REPLAY_CHECK_TOTAL_TIMEOUT_S``,
records progress on the Operation and the outcome on the Version's ``observed.replayCheck``. It runs
in the validation process (``workers.operations_tasks.validate_version``), under that process's
per-Space share: one Space's checks never take the slot kept for other Spaces.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from models import db as models_db
from models import resource_sql
from models import resources as res_models
from models.base import utcnow
from models.errors import DomainError
from services import instance_history, instances, operations, replay_checks
from services.instance_pages import PageRequest
from takohost.runtime import protocol, replay_check
from workers import sandbox
from workers.engine import store
from workers.sandbox import jobs, receive

__all__ = ["CheckResult", "check_history", "check_spec", "run_operation"]

log = logging.getLogger(__name__)

#: The child's watchdog during a check: it kills itself this long after the parent's last frame.
WATCHDOG_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """``result`` ∈ ``compatible``/``diverged``/``error``; ``replay`` (not ``error``) is the
    :class:`replay_check.ReplayResult`; ``message`` says it for humans; ``seconds`` it took."""

    result: str
    message: str
    seconds: float
    replay: replay_check.ReplayResult | None = None


class _SandboxChild:
    """``replay_check.Child`` over a sandbox child, through ``receive.receive`` (the loop every
    tenant run shares): log and code frames are dropped (nothing is kept of a check), every
    receive is bounded by the check's deadline."""

    def __init__(self, handle: sandbox.ChildHandle, *, deadline: float) -> None:
        self.handle = handle
        self.deadline = deadline

    def recv(self) -> dict[str, Any]:
        """The child's next message but log and code frames; ``TimeoutError`` past the deadline,
        ``protocol.ProtocolError`` for a frame that breaks the protocol."""
        try:
            return receive.receive(
                self.handle,
                logs=None,
                space=None,
                deadline=self.deadline,
                poll=self._poll,
                intercept=lambda message: message["op"] in ("log", "code"),
            )
        except receive.Overtime:
            raise TimeoutError("the check's time limit was reached") from None
        except receive.Violation as exc:
            raise protocol.ProtocolError(str(exc)) from None

    def _poll(self) -> None:
        if time.monotonic() >= self.deadline:
            raise TimeoutError("the check's time limit was reached")

    def answer(self, message: dict[str, Any]) -> None:
        """Send the answer to the child's pending request."""
        self.handle.send(message)


def check_history(
    *,
    version_uid: str,
    class_name: str,
    instance_id: str,
    events: list[dict],
    status: dict | None,
    zygote: sandbox.Zygote,
    database_url: str,
    space: str | None = None,
    time_limit: float = 10.0,
) -> CheckResult:
    """Replay Version ``version_uid``'s class ``class_name`` against an instance's history
    (``events`` as the HTTP history serves them, ``status`` its ``{"status", "output"?,
    "error"?}``) in a sandbox child. Never raises for what the candidate does: an import error, a
    protocol violation, a crash or the ``time_limit`` (seconds) is ``error``."""
    spec = store.backend_for(database_url).load_version(version_uid)
    if spec is None:
        return CheckResult("error", f"no WorkerVersion {version_uid}", 0.0)
    return check_spec(
        version_uid=version_uid,
        spec=spec,
        class_name=class_name,
        instance_id=instance_id,
        events=events,
        status=status,
        zygote=zygote,
        space=space,
        time_limit=time_limit,
    )


def check_spec(
    *,
    version_uid: str,
    spec: dict,
    class_name: str,
    instance_id: str,
    events: list[dict],
    status: dict | None,
    zygote: sandbox.Zygote,
    space: str | None = None,
    time_limit: float = 10.0,
) -> CheckResult:
    """:func:`check_history` for a Version ``spec`` already read (``mainModule``, ``modules``,
    ``vars``, ``workflowBindings``)."""
    started = time.monotonic()
    bindings = {b["name"]: b["resource"]["resourceUid"] for b in spec.get("workflowBindings") or []}
    version = jobs.VersionChoice(uid=version_uid, spec=spec, bindings=bindings)
    event: dict[str, Any] = {"instanceId": instance_id}
    for recorded in events:
        if recorded.get("eventType") == "InstanceCreated" and "params" in (recorded.get("attributes") or {}):
            event["params"] = recorded["attributes"]["params"]
    job = jobs.job_message(
        kind="workflow", version=version, event=event, class_name=class_name, watchdog_seconds=WATCHDOG_SECONDS
    )
    handle = zygote.spawn(job, space=space)
    try:
        child = _SandboxChild(handle, deadline=started + time_limit)
        replayed = replay_check.Replay(events, status=status).serve(child)
    except TimeoutError:
        return CheckResult("error", f"time limit: the replay took more than {time_limit:g} s", time.monotonic() - started)
    except sandbox.ChildGone:
        return CheckResult("error", "the workflow process exited during the replay", time.monotonic() - started)
    except (RuntimeError, protocol.ProtocolError) as exc:
        return CheckResult("error", str(exc), time.monotonic() - started)
    finally:
        handle.kill_and_wait()
        handle.close()
    seconds = time.monotonic() - started
    if replayed.ok:
        return CheckResult("compatible", replayed.message, seconds, replayed)
    assert replayed.divergence is not None
    return CheckResult("diverged", f"diverged at step {replayed.divergence.index} ({replayed.divergence.message})", seconds, replayed)


def _history(target: replay_checks.Target, *, space: str) -> tuple[list[dict], dict]:
    """Every event of ``target``'s history (all pages) and its ``{"status", "output"?, "error"?}``."""
    events: list[dict] = []
    token = None
    while True:
        page = instance_history.history(
            space=space,
            workflow_uid=target.workflow_uid,
            instance_id=target.instance_id,
            page=PageRequest(token=token, limit=1000),
        )
        events.extend(page.events)
        token = page.next_page_token
        if token is None:
            break
    return events, instances.status(space=space, workflow_uid=target.workflow_uid, instance_id=target.instance_id)


def _check_target(
    target: replay_checks.Target, *, version: dict, zygote: sandbox.Zygote, time_limit: float
) -> dict[str, Any]:
    """One instance's result (``services.replay_checks.summary`` describes its shape)."""
    result: dict[str, Any] = {"workflow": target.workflow, "id": target.instance_id, "status": target.status}
    if target.class_name not in (version["observed"].get("workflowClasses") or []):
        return {**result, "result": "error", "message": f"the Version does not export class {target.class_name!r}"}
    try:
        events, status = _history(target, space=version["space"])
    except DomainError as exc:  # purged meanwhile
        return {**result, "result": "error", "message": f"could not read the instance: {exc.message}"}
    outcome = check_spec(
        version_uid=version["uid"],
        spec=version["spec"],
        class_name=target.class_name,
        instance_id=target.instance_id,
        events=events,
        status=status,
        zygote=zygote,
        space=version["space"],
        time_limit=time_limit,
    )
    result.update(result=outcome.result, message=outcome.message, ms=round(outcome.seconds * 1000, 1))
    divergence = outcome.replay.divergence if outcome.replay is not None else None
    if divergence is not None:
        result.update(step=divergence.index, expected=divergence.expected, found=divergence.found)
    return result


def run_operation(operation_id: str) -> str:
    """Run the ``check`` Operation ``operation_id`` (already ``running``, its reconcile lock held by
    the caller) to its end: ``done``. Per instance ``compatible``/``diverged``/``error``; instances
    past the total time limit are ``not_checked``. The Operation succeeds whatever the results (they
    are the Version's ``observed.replayCheck``); a host failure raises (the caller retries)."""
    with models_db.session_scope() as session:
        op = session.get(res_models.Operation, operation_id)
        assert op is not None  # the caller holds its reconcile lock
        resource = session.get(res_models.Resource, op.resource_uid)
        assert resource is not None  # an Operation's resource row is never deleted, only marked
        terminal = int((op.request or {}).get("terminal", 0))
        targets = replay_checks.targets_txn(session, version=resource, terminal=terminal)
        version = {"uid": resource.uid, "space": resource.space, "spec": resource.spec, "observed": resource.observed or {}}
    per_instance, started = replay_checks.instance_timeout_s(), time.monotonic()
    deadline = started + replay_checks.total_timeout_s()
    zygote = sandbox.get_zygote() if targets else None
    results: list[dict[str, Any]] = []
    shown = 0.0
    for target in targets:
        left = deadline - time.monotonic()
        if left <= 0:
            results.append({"workflow": target.workflow, "id": target.instance_id, "status": target.status,
                            "result": "not_checked", "message": "the check's total time limit was reached"})
            continue
        assert zygote is not None
        results.append(_check_target(target, version=version, zygote=zygote, time_limit=min(per_instance, left)))
        if time.monotonic() - shown >= 0.5 or len(results) == len(targets):
            shown = time.monotonic()
            progress = {"checked": len(results), "total": len(targets), "totals": _totals(results)}
            with models_db.session_scope() as session:
                if not replay_checks.progress_txn(session, operation_id=operation_id, progress=progress, now=utcnow()):
                    return "done"
    now = utcnow()
    with models_db.session_scope() as session:
        op = resource_sql.lock_operation_txn(session, operation_id=operation_id, refresh=True)
        if op is None or op.state not in operations.UNFINISHED:
            return "done"
        resource = resource_sql.lock_operated_txn(session, uid=op.resource_uid)
        assert resource is not None  # an Operation's resource row is never deleted, only marked
        check = replay_checks.summary(operation_id=operation_id, terminal=terminal, results=results, now=now)
        replay_checks.record_txn(session, version=resource, check=check)
        resource_sql.record_progress(op, progress={"checked": len(results), "total": len(targets), "totals": check["totals"]})
        operations.set_state(op, operations.SUCCEEDED, now=now)
    log.info("replay check done", extra={"operation": operation_id, "version": version["uid"], "totals": check["totals"]})
    return "done"


def _totals(results: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(1 for r in results if r["result"] == k) for k in replay_checks.RESULTS}
