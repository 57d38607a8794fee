"""One heartbeat per worker process: keeps the leases of running contexts and cron deliveries
alive, keeps their children's watchdogs fed and notices fencing (docs/spec/architecture.md#ar-context "One replay context" step 2, "Terminate and
delete" steps 2–3; docs/spec/cron-trigger.md#cr-delivery).

Two daemon threads, so that a slow Redis or Postgres round trip never starves a child's watchdog:

* the **beat** (every ``RENEW_FRACTION`` of the lease TTL, and at once when woken): renews each
  watched lease (compare-and-set; a lease another owner holds is lost → kill the child), then
  reads the watched contexts' epochs from Postgres (a bumped epoch — terminate, delete, a newer
  context — means fenced → kill the child now, not at its next commit, so that an effect that
  runs for minutes does not keep a terminate or delete waiting). A cron delivery has no epoch
  (its trigger's DELETE fence is read by its own loop, ``workers.cron_tasks``): only its lease
  is renewed;
* the **pinger** (every ``PING_FRACTION`` of the TTL): pings each child, but only while its lease
  was renewed recently (a renewal *started* less than ``PING_WINDOW_FRACTION`` of the TTL ago).

The stop proof (lease expiry ⇒ no user code runs): the child's watchdog (``WATCHDOG_FRACTION`` of the
TTL, :func:`watchdog_seconds`) kills it when pings stop. Pings stop at the latest ``PING_WINDOW`` after
the start of the last successful renewal (or at once when this process freezes), so the child is dead
by ``renewal + PING_WINDOW + WATCHDOG`` = 0.9 TTL, before the lease (``renewal + TTL``) can expire.
And as long as renewals succeed the child is pinged far more often than its watchdog needs, so a
busy machine does not kill healthy children.

The context's main thread then gets ``ChildGone`` from ``recv`` and looks at the flags (and at
``last_ping``: a child whose pings were withheld died of the host's trouble, not of its code).
Keeping Redis and the epoch check off the per-step path is the fast path that
docs/spec/host-features.md#hf-performance asks for (the figures: docs/performance.md).

A terminate or a DELETE does not wait for the next beat: after fencing it publishes the instance
pks on ``{namespace}:stop`` (``services.stop_signals``); a listener thread wakes the beat at
once when one of them is watched here, so the stop is proven (and the lease dropped) within a
fraction of a second. The hint is only for speed: without it the next beat does the same.

A context registers only after its token is taken, with a lease it has just taken: a new
registration needs no beat of its own (the lease is fresh, the epoch its own). The one race left
is a stop between the token and the registration, whose hint found nothing watched: hints are
remembered (:data:`HINT_MEMORY_S`), and a registration whose pk was hinted after its lease was
taken wakes the beat.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable

from services import redis_keys, stop_signals
from workers.sandbox import lease as lease_mod
from workers.sandbox.child import ChildGone, ChildHandle

log = logging.getLogger(__name__)

#: Fractions of the lease TTL (see the module doc for why they prove the stop).
RENEW_FRACTION = 0.25
PING_FRACTION = 0.1
PING_WINDOW_FRACTION = 0.4
WATCHDOG_FRACTION = 0.5
#: A child that vanished after going this share of its watchdog without a ping was (most likely)
#: killed by the watchdog: the host's fault, never recorded as the code's failure (replay contexts
#: in ``workers.engine.context`` and cron deliveries in ``workers.cron_tasks`` both judge by it).
WATCHDOG_SUSPECT = 0.8
#: How long a stop hint is kept for a context that registers after it (seconds), and how many
#: pks are kept at most (beyond that the memory is pruned; a forgotten hint costs only speed).
HINT_MEMORY_S = 60.0
HINT_MEMORY_ENTRIES = 10_000


def watchdog_seconds(ttl_ms: int) -> float:
    """The child watchdog for a lease TTL of ``ttl_ms`` milliseconds, in seconds (half the TTL)."""
    return ttl_ms * WATCHDOG_FRACTION / 1000.0


@dataclasses.dataclass(eq=False)
class Watched:
    """One running context (or cron delivery) as the heartbeat sees it; ``lost``/``fenced`` are
    set by the threads. A delivery (:meth:`delivery`) has no ``instance_pk`` and no ``epoch``.

    ``renewed_at`` is the monotonic time at which the last successful lease renewal (or the
    acquisition) *started*; ``last_ping`` the monotonic time of the last ping sent to the child
    (or of its job); ``max_gap`` the longest time in seconds the child went without a ping — when it
    reached the watchdog, the child may have killed itself for the host's sake.
    """

    instance_pk: int | None
    epoch: int | None
    lease: lease_mod.Lease | lease_mod.DeliveryLease
    child: ChildHandle | None = None
    lost: bool = False
    fenced: bool = False
    active: bool = True
    renewed_at: float = dataclasses.field(default_factory=time.monotonic)
    last_ping: float = dataclasses.field(default_factory=time.monotonic)
    max_gap: float = 0.0
    #: The step attempt the child runs now (``{"name", "attempt", "since"}``, set by the context's
    #: observer), published by the beat for the progress view; ``published``: a key is out there.
    step: dict | None = None
    published: bool = False

    @classmethod
    def delivery(cls, lease: lease_mod.DeliveryLease) -> Watched:
        """A cron delivery holding ``lease`` (renewed from the moment it was taken); its child is
        set once spawned."""
        return cls(instance_pk=None, epoch=None, lease=lease, renewed_at=lease.taken_at)

    def attach(self, child: ChildHandle) -> None:
        """Ping ``child`` from now on (its job was just sent: its watchdog starts now); the ping
        gap counts from here."""
        self.last_ping = time.monotonic()
        self.max_gap = 0.0
        self.child = child

    def detach(self) -> None:
        """Stop pinging the child (it is being stopped; the heartbeat no longer kills it). The
        ping gap is kept, and keeps growing, for the judgement of a child that vanished."""
        self.child = None

    def log_fields(self) -> dict[str, object]:
        """Log fields naming this run: the context's instance pk, or the delivery's lease key."""
        return {"instance": self.instance_pk} if self.instance_pk is not None else {"lease": self.lease.key}

    def ping_gap(self) -> float:
        """The longest time in seconds without a ping so far, the current stretch included."""
        return max(self.max_gap, time.monotonic() - self.last_ping)


class Heartbeat:
    """The process's heartbeat: beat, pinger and stop-listener threads (started on first
    :meth:`register`). ``ttl_s`` is the lease TTL in seconds; ``interval`` (seconds between beats)
    defaults to ``RENEW_FRACTION`` of it."""

    def __init__(
        self,
        *,
        leases: lease_mod.LeaseStore,
        read_epochs: Callable[[list[int]], dict[int, int]],
        ttl_s: float,
        interval: float | None = None,
    ) -> None:
        self.leases = leases
        self.ttl_s = ttl_s
        self.interval = interval if interval is not None else ttl_s * RENEW_FRACTION
        self.ping_interval = ttl_s * PING_FRACTION
        self.ping_window = ttl_s * PING_WINDOW_FRACTION
        self._read_epochs = read_epochs
        self._watched: set[Watched] = set()
        self._hinted: dict[int, float] = {}  # pk → monotonic time of its latest stop hint
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._threads: dict[str, threading.Thread] = {}

    def register(self, watched: Watched) -> None:
        """Start watching a context (``renewed_at`` = when its lease was taken, a monotonic time;
        its child may be set later). Its lease is renewed by the periodic beat (it was just taken);
        the beat runs at once only when a stop hint for its pk arrived after ``renewed_at``."""
        with self._lock:
            self._watched.add(watched)
            hinted = None if watched.instance_pk is None else self._hinted.get(watched.instance_pk)
            for name, target in (("beat", self._loop), ("pinger", self._pings), ("stop", self._listen)):
                thread = self._threads.get(name)
                if thread is None or not thread.is_alive():
                    thread = threading.Thread(target=target, name=f"takohost-{name}", daemon=True)
                    self._threads[name] = thread
                    thread.start()
        if hinted is not None and hinted >= watched.renewed_at:
            self._wake.set()

    def notify(self, instance_pks: set[int]) -> bool:
        """A stop hint for ``instance_pks``: beat now if one of them is watched here (True). Each
        hint is remembered for :data:`HINT_MEMORY_S` seconds, for a context that registers later."""
        now = time.monotonic()
        with self._lock:
            if len(self._hinted) > HINT_MEMORY_ENTRIES:  # only a speed hint: forget, never grow
                self._hinted = {pk: at for pk, at in self._hinted.items() if now - at < HINT_MEMORY_S}
                if len(self._hinted) > HINT_MEMORY_ENTRIES:
                    self._hinted.clear()
            for pk in instance_pks:
                self._hinted[pk] = now
            watched = bool(instance_pks & {w.instance_pk for w in self._watched})
        if watched:
            self._wake.set()
        return watched

    def _listen(self) -> None:
        """Follow ``{namespace}:stop`` (reconnecting after Redis errors) and pass hints to
        :meth:`notify`. Runs for the life of the process."""
        name = stop_signals.channel(self.leases.namespace)
        while True:
            pubsub = None
            try:
                pubsub = self.leases.client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(name)
                while True:
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        self.notify(stop_signals.decode(message["data"]))
            except Exception:  # noqa: BLE001 - Redis away: the periodic epoch check still stops contexts
                log.debug("stop listener reconnecting", exc_info=True)
                time.sleep(1.0)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # noqa: BLE001 - closing a broken connection
                        pass

    def unregister(self, watched: Watched) -> None:
        """Stop watching a context (before its lease is released or left to expire): once this
        returns, its lease is never renewed again."""
        with self._lock:
            self._watched.discard(watched)
            watched.active = False
        if watched.published:
            self._publish_step(watched, gone=True)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            with self._lock:
                current = list(self._watched)
            if not current:
                continue
            try:
                self.beat(current)
            except Exception:  # noqa: BLE001 - the thread must survive Redis/Postgres hiccups
                log.warning("heartbeat failed", exc_info=True)

    def _pings(self) -> None:
        while True:
            time.sleep(self.ping_interval)
            with self._lock:
                current = list(self._watched)
            self.ping(current)

    def ping(self, current: list[Watched]) -> None:
        """Ping the child of every context in ``current`` whose lease was renewed within the ping
        window (see the module doc: never ping a child whose lease might expire before it dies)."""
        for watched in current:
            child = watched.child
            if child is None or time.monotonic() - watched.renewed_at >= self.ping_window:
                continue
            watched.max_gap = watched.ping_gap()
            try:
                child.ping()
                watched.last_ping = time.monotonic()
            except (ChildGone, OSError, RuntimeError):
                pass

    def beat(self, current: list[Watched]) -> None:
        """One heartbeat over ``current`` (public so tests can drive it without waiting): renew the
        leases, then check the epochs."""
        for watched in current:
            # Under the lock: a context that unregistered (and may be releasing its lease right
            # now) is never renewed — ``renew`` would take a vanished lease again and leave a ghost
            # lease that keeps the instance "busy" for a whole TTL.
            with self._lock:
                if not watched.active:
                    continue
                started = time.monotonic()
                try:
                    renewed = self.leases.renew(watched.lease)
                except Exception:  # noqa: BLE001 - Redis down: the child watchdog is the backstop
                    log.warning("lease renewal failed", extra=watched.log_fields(), exc_info=True)
                    continue
                if renewed:
                    watched.renewed_at = started
                    self._publish_step(watched)
                    continue
                watched.lost = True
            log.warning("lease lost", extra=watched.log_fields())
            self._kill(watched)
        contexts = {w: w.instance_pk for w in current if w.instance_pk is not None}
        if not contexts:
            return  # only deliveries: they have no epoch
        epochs = self._epochs(list(contexts.values()))
        for watched, pk in contexts.items():
            if epochs is not None and epochs.get(pk) != watched.epoch:
                log.info("context fenced", extra={"instance": watched.instance_pk, "epoch": watched.epoch})
                watched.fenced = True
                self._kill(watched)

    def _publish_step(self, watched: Watched, *, gone: bool = False) -> None:
        """Publish (or withdraw) the step attempt ``watched``'s child runs, for ``…/progress``: at
        most one Redis write per beat, none while no step runs; best effort (the key expires with
        the lease TTL)."""
        step = None if gone else watched.step
        if (step is None and not watched.published) or watched.instance_pk is None:
            return
        key = redis_keys.running_step_key(self.leases.namespace, watched.instance_pk)
        try:
            if step is None:
                self.leases.client.delete(key)
            else:
                value = json.dumps({**step, "epoch": watched.epoch})
                self.leases.client.set(key, value, px=int(self.ttl_s * 1000))
            watched.published = step is not None
        except Exception:  # noqa: BLE001 - the view is a hint; the lease is what matters
            log.debug("running step not published", exc_info=True)

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


_heartbeats: dict[tuple[int, str, str, int], Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat_for(
    *, leases: lease_mod.LeaseStore, url: str, read_epochs: Callable[[list[int]], dict[int, int]]
) -> Heartbeat:
    """This process's heartbeat for ``leases`` and database ``url`` (timing from the lease TTL);
    ``read_epochs`` reads stored epochs on a connection the thread may use."""
    key = (os.getpid(), leases.key(0), url, leases.ttl_ms)
    with _heartbeats_lock:
        beat = _heartbeats.get(key)
        if beat is None:
            beat = _heartbeats[key] = Heartbeat(
                leases=leases, read_epochs=read_epochs, ttl_s=leases.ttl_ms / 1000.0
            )
        return beat
