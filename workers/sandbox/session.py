"""One tenant run's hold on the sandbox, for a replay context (``workers.engine.context``) and a
cron delivery (``workers.cron_tasks``) alike: its lease, kept alive by the process's one heartbeat
(:mod:`workers.sandbox.heartbeat`); its child, pinged by that heartbeat while the lease is fresh;
the run's log capture (``workers.tenant_logs.LogCollector``, fed by :mod:`workers.sandbox.receive`);
and the stop proof (``ChildHandle.kill_and_wait``).

The order of a stop is the stop proof's (docs/spec/architecture.md#ar-shape: stop, then
publish): the child's pings end first, then it is killed and proven dead, its egress proxy's last
records are kept with its logs, its handle is closed; only a proven stop lets the lease be
released — an unproven one drops the lease from the session, so that its expiry (after the
child's watchdog) proves the stop instead.
"""

from __future__ import annotations

import logging
from typing import Any

from workers import tenant_logs
from workers.sandbox import heartbeat, receive
from workers.sandbox import lease as lease_mod
from workers.sandbox.child import ChildHandle

__all__ = ["Session"]

log = logging.getLogger(__name__)


class Session:
    """A run's lease, child, pings, logs and stop proof (see the module doc).

    ``leases``/``beat``: the process's lease store and heartbeat; ``lease`` the run's lease
    (``None`` until it is taken, and again once released or left to expire); ``space`` the
    Space whose code runs (its egress records are counted for it); ``logs`` the run's collector
    (``None``: the run keeps no logs). Set them as the run learns them.
    """

    def __init__(
        self,
        *,
        leases: lease_mod.LeaseStore,
        beat: heartbeat.Heartbeat,
        lease: lease_mod.Lease | lease_mod.DeliveryLease | None = None,
        space: str | None = None,
        logs: tenant_logs.LogCollector | None = None,
    ) -> None:
        self.leases = leases
        self.beat = beat
        self.lease = lease
        self.space = space
        self.logs = logs
        self.watched: heartbeat.Watched | None = None
        self.child: ChildHandle | None = None

    def watch(self, watched: heartbeat.Watched) -> None:
        """Keep the lease alive through the heartbeat from now on (``watched`` holds it; the
        session's child, if any, is pinged as ``watched.child``)."""
        self.watched = watched
        self.beat.register(watched)

    def attach(self, child: ChildHandle) -> None:
        """The run's child (its job was just sent): pinged from now on if the lease is watched."""
        self.child = child
        if self.watched is not None:
            self.watched.attach(child)

    def receive(self, **kwargs: Any) -> dict[str, Any]:
        """The child's next frame (``receive.receive`` with this session's child, logs and
        Space; ``kwargs`` are its ``deadline``, ``poll`` and ``intercept``)."""
        assert self.child is not None
        return receive.receive(self.child, logs=self.logs, space=self.space, **kwargs)

    def stop_child(self, *, keep_alive: bool = False) -> bool:
        """Stop the child and prove it: its pings end (and, unless ``keep_alive``, the lease's
        renewals), it is killed and proven dead (``ChildHandle.kill_and_wait``), the egress
        proxy's last records go to the logs, its handle is closed. True when proven or when
        there was no child; False → the lease is dropped from the session (never released: it
        expires after the child's watchdog, which proves the stop)."""
        if self.watched is not None:
            if not keep_alive:
                self.beat.unregister(self.watched)
            self.watched.detach()
        child, self.child = self.child, None
        if child is None:
            return True
        proven = child.kill_and_wait()
        receive.take_egress(child, self.logs, space=self.space, records=child.finish_egress())
        child.close()
        if not proven:
            self.lease = None
        return proven

    def release(self) -> None:
        """Stop keeping the lease alive and release it, if the session still holds it (it is
        never renewed again once this returns). Never raises: a failed release is logged, the
        lease expires by itself."""
        if self.watched is not None:
            self.beat.unregister(self.watched)
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            self.leases.release(lease)
        except Exception:  # noqa: BLE001 - it expires by itself
            log.warning("lease release failed; it expires", extra={"lease": lease.key}, exc_info=True)
