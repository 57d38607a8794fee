"""One heartbeat thread per worker process: keeps the leases of running contexts alive, keeps their
children's watchdogs fed and notices fencing (DESIGN "One replay context" step 2, "Terminate and
delete" steps 2–3).

Every ``interval`` seconds (a third of the lease TTL), for each registered context, in this order:

1. ``ping`` the child (its watchdog, ``watchdog_seconds`` = two thirds of the TTL, kills it when
   pings stop: so if this process freezes, the child is dead before the lease can expire);
2. renew the lease (compare-and-set); a lease another owner holds is lost → kill the child;
3. read the instance's epoch from Postgres; a bumped epoch (terminate, delete, a newer context)
   means this context is fenced → kill the child now, not at its next commit, so that an effect
   that runs for minutes does not keep a terminate or delete waiting.

The context's main thread then gets ``ChildGone`` from ``recv`` and looks at the flags. Keeping
Redis and the epoch check off the per-step path is what ANCHORS.md asks for.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable

from workers.engine import lease as lease_mod
from workers.engine import sandbox

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Watched:
    """One running context as the heartbeat sees it; ``lost``/``fenced`` are set by the thread."""

    instance_pk: int
    epoch: int
    lease: lease_mod.Lease
    child: sandbox.ChildHandle | None = None
    lost: bool = False
    fenced: bool = False


class Heartbeat:
    """The process's heartbeat thread (started on first :meth:`register`)."""

    def __init__(
        self,
        *,
        leases: lease_mod.LeaseStore,
        read_epochs: Callable[[list[int]], dict[int, int]],
        interval: float,
    ) -> None:
        self.leases = leases
        self.interval = interval
        self._read_epochs = read_epochs
        self._watched: set[Watched] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, watched: Watched) -> None:
        """Start watching a context (its lease is fresh; its child may be set later)."""
        with self._lock:
            self._watched.add(watched)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="takohost-heartbeat", daemon=True)
                self._thread.start()

    def unregister(self, watched: Watched) -> None:
        """Stop watching a context (before its lease is released or left to expire)."""
        with self._lock:
            self._watched.discard(watched)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval)
            with self._lock:
                current = list(self._watched)
            if not current:
                continue
            try:
                self.beat(current)
            except Exception:  # noqa: BLE001 - the thread must survive Redis/Postgres hiccups
                log.warning("heartbeat failed", exc_info=True)

    def beat(self, current: list[Watched]) -> None:
        """One heartbeat over ``current`` (public so tests can drive it without waiting)."""
        for watched in current:
            child = watched.child
            if child is not None:
                try:
                    child.ping()
                except (sandbox.ChildGone, OSError):
                    pass
            try:
                if not self.leases.renew(watched.lease):
                    log.warning("lease lost", extra={"instance": watched.instance_pk})
                    watched.lost = True
                    self._kill(watched)
            except Exception:  # noqa: BLE001 - Redis down: the child watchdog is the backstop
                log.warning("lease renewal failed", extra={"instance": watched.instance_pk}, exc_info=True)
        epochs = self._epochs([w.instance_pk for w in current])
        for watched in current:
            if epochs is not None and epochs.get(watched.instance_pk) != watched.epoch:
                log.info("context fenced", extra={"instance": watched.instance_pk, "epoch": watched.epoch})
                watched.fenced = True
                self._kill(watched)

    def _epochs(self, pks: list[int]) -> dict[int, int] | None:
        try:
            return self._read_epochs(pks)
        except Exception:  # noqa: BLE001 - the database is away: check again next time
            log.warning("heartbeat cannot read epochs", exc_info=True)
            return None

    @staticmethod
    def _kill(watched: Watched) -> None:
        child = watched.child
        if child is not None:
            try:
                child.kill_and_wait()
            except Exception:  # noqa: BLE001 - the context closed the handle meanwhile: it is gone
                log.debug("child already closed", exc_info=True)


_heartbeats: dict[tuple[int, str, str], Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat_for(
    *, leases: lease_mod.LeaseStore, url: str, read_epochs: Callable[[list[int]], dict[int, int]]
) -> Heartbeat:
    """This process's heartbeat for ``leases`` and database ``url`` (interval: a third of the
    lease TTL); ``read_epochs`` reads stored epochs on a connection the thread may use."""
    key = (os.getpid(), leases.key(0), url)
    with _heartbeats_lock:
        beat = _heartbeats.get(key)
        if beat is None:
            beat = _heartbeats[key] = Heartbeat(
                leases=leases, read_epochs=read_epochs, interval=leases.ttl_ms / 3000.0
            )
        return beat
