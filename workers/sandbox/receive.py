"""The one loop that waits for a sandbox child's next frame, for every kind of tenant run.

A replay context (``workers.engine.context``) and a cron delivery (``workers.cron_tasks``) both
wait on their child the same way: take the egress proxy's records into the run's logs, wait no
longer than the next log flush (``tenant_logs.LogCollector.wait_timeout``), the run's deadline
and whatever the caller's own checks need, check the frame (the child is untrusted:
``protocol.check_child_message``), keep ``log`` frames with the logs and hand anything else back.
What differs between callers is passed in: ``poll`` (the caller's checks before each wait —
the delivery's time limit, lost lease and DELETE fence) and ``intercept`` (frames the caller
consumes on the way — the context's ``code`` frame).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from takohost.runtime import protocol
from workers import tenant_logs
from workers.sandbox.child import ChildHandle

__all__ = ["Overtime", "Violation", "receive", "take_egress"]


class Violation(Exception):
    """The child broke the protocol: a malformed frame, a log flood, a log frame where no logs
    are kept (it is untrusted; a context ends ``run_threw``, a delivery is a failed run)."""


class Overtime(Exception):
    """No frame but logs arrived before the deadline given to :func:`receive`."""


def take_egress(
    child: ChildHandle,
    logs: tenant_logs.LogCollector | None,
    *,
    space: str | None,
    records: list[dict[str, Any]] | None = None,
) -> None:
    """Keep the egress proxy's records of ``child`` with ``logs`` (tagged for ``space``):
    ``records`` (the last ones, from ``ChildHandle.finish_egress``), or when ``None`` whatever
    arrived so far (nothing without egress). Without ``logs`` the records are dropped."""
    if records is None:
        if child.egress is None:
            return
        records = child.egress.records()
    if records and logs is not None:
        logs.egress(records, space=space)


def receive(
    child: ChildHandle,
    *,
    logs: tenant_logs.LogCollector | None,
    space: str | None,
    deadline: float | None = None,
    poll: Callable[[], float | None] | None = None,
    intercept: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """The child's next frame but ``log`` frames, which go to ``logs`` (written at most
    ``tenant_logs.FLUSH_SECONDS`` after they arrived, while waiting here).

    ``deadline`` (monotonic seconds; ``None``: none): a wait that times out at or after it raises
    :class:`Overtime`. ``poll()`` runs before each wait: it returns the longest wait in seconds it
    allows (``None``: no bound of its own), or raises to end the wait (the exception propagates).
    ``intercept(frame)`` sees every checked frame first: True when it consumed it (the loop
    waits again). With egress the proxy's records are taken into ``logs`` (for ``space``) at
    least every flush interval.

    Raises:
        Overtime: the deadline passed without a frame but logs.
        Violation: a malformed frame, a log flood, or a log frame while ``logs`` is ``None``.
        workers.sandbox.child.ChildGone: the child's channel closed or the child exited.
    """
    while True:
        limit = None if poll is None else poll()
        take_egress(child, logs, space=space)
        if child.egress is not None:
            limit = tenant_logs.FLUSH_SECONDS if limit is None else min(limit, tenant_logs.FLUSH_SECONDS)
        timeout = limit if logs is None else logs.wait_timeout(limit)
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        try:
            message = protocol.check_child_message(child.recv(timeout))
        except TimeoutError:
            if logs is not None:
                logs.flush_due()
            if deadline is not None and time.monotonic() >= deadline:
                raise Overtime from None
            continue
        except protocol.ProtocolError as exc:
            raise Violation(str(exc)) from None
        if intercept is not None and intercept(message):
            continue
        if message["op"] != "log":
            return message
        if logs is None:
            raise Violation("a log frame without a log collector")
        try:
            logs.accept(message)
        except tenant_logs.LogFlood as exc:
            raise Violation(f"log flood: {exc}") from None
        logs.flush_due()
