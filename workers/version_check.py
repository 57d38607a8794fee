"""Replay a created WorkerVersion, in the sandbox, against one instance's recorded history (issue 28
item 3: the host's side of ``takohost versions check``; docs/testing.md).

:func:`check_history` starts a sandbox child with the Version's ``workflow`` job — the same job a
replay context sends, for the instance's id and params — and answers it from the history with
``takohost.runtime.replay_check.Replay`` (the comparison ``takohost.testing.replay`` makes in
process): every recorded step replays its outcome, the first step without a recorded result
ends the replay; no effect runs, no event is read, nothing is written. The child is killed and
proven dead afterwards. Bounded: ``time_limit`` seconds in all, the child's watchdog besides.

Not wired to an endpoint or Operation yet: the CLI's ``versions check`` replays a directory in
its own process; this is the piece that checks a created Version where tenant code belongs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from takohost.runtime import protocol, replay_check
from workers import sandbox_host
from workers.engine import sandbox, store

__all__ = ["CheckResult", "check_history", "check_spec"]

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
    """``replay_check.Child`` over a sandbox child: log frames are dropped (nothing is kept of a
    check), every receive is bounded by the check's deadline."""

    def __init__(self, handle: sandbox.ChildHandle, *, deadline: float) -> None:
        self.handle = handle
        self.deadline = deadline

    def recv(self) -> dict[str, Any]:
        """The child's next message but log and code frames; ``TimeoutError`` past the deadline."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the check's time limit was reached")
            message = self.handle.recv(left)
            if message.get("op") not in ("log", "code"):
                return message

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
    version = sandbox_host.VersionChoice(uid=version_uid, spec=spec, bindings=bindings)
    event: dict[str, Any] = {"instanceId": instance_id}
    for recorded in events:
        if recorded.get("eventType") == "InstanceCreated" and "params" in (recorded.get("attributes") or {}):
            event["params"] = recorded["attributes"]["params"]
    job = sandbox_host.job_message(
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
