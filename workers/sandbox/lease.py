"""Replay-context leases in Redis (docs/spec/architecture.md#ar-shape, docs/spec/architecture.md#ar-context "One replay context" step 2).

A lease says which worker process owns an instance right now: key
``{namespace}:lease:{instance_pk}`` (``services.redis_keys.lease_key``), value
``{owner}:{nonce}``, set with ``SET NX PX ttl`` and renewed by the heartbeat with a
compare-and-set script, so a process only ever extends or deletes its own lease. The lease is
an efficiency and stop-proof device, not the safety device: commits are fenced by the instance
epoch in Postgres (``store``), so two owners at once (after a Redis flush, say) can waste work
but never both commit.

Stop proof: the owner deletes its lease only after its child is proven dead, and a child whose
pings stop kills itself before the lease could expire (``watchdog_seconds`` < TTL), so "no lease"
means "no user code of this instance runs" (docs/spec/architecture.md#ar-terminate "Terminate and delete").

Fair share between Spaces (docs/spec/host-features.md#hf-isolation): a Space runs at most ``settings.space_max_contexts``
replay contexts at once across the fleet. The count is the Space's live leases: the SET
``{namespace}:space-contexts:{space}`` lists the pks whose leases that Space's contexts took, and a
member counts only while its lease key exists (a SIGKILLed worker's slot frees when its lease
expires; a flushed Redis forgets nothing that matters — renewals add the member again).
:meth:`LeaseStore.admit` takes the lease and the slot in one script (one round trip, replacing the
plain ``SET NX``); over the cap it takes nothing and records the pk in the ZSET
``{namespace}:space-waiting:{space}`` instead (the instance stays ``queued``: deferral costs no
Postgres write). :meth:`LeaseStore.release` of a Space's lease pops the oldest waiting pk in the
same script and hands it to ``handoff`` (``services.dispatch.run_context``): the finishing context
starts the next waiting one. A lost hand-off (a worker killed between the pop and the send, a
lease left to expire) is recovered by the beat sweep, which dispatches at most the free slots of
each Space (``workers.engine.sweep``). The scripts name lease keys they build from ARGV: one
Redis (not a cluster), as everywhere in this host.

A cron delivery takes a slot of its Space too (:meth:`LeaseStore.admit_delivery`): it runs the
tenant's code in a worker slot like a context, and uncounted, one Space's long ``scheduled``
handlers held every slot of the fleet while another Space's instances stayed ``queued``. Its
member in the SET (and, deferred, in the ZSET) is ``cron:{match_pk}``, live while its delivery
lease exists; a release that pops such a member hands the slot on with
``services.dispatch.deliver_cron_match``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

import redis

from core import config
from services import dispatch, fleet, redis_client, redis_keys

log = logging.getLogger(__name__)

#: Outcomes of :meth:`LeaseStore.admit` that are not a lease (and the context's outcome words).
BUSY = "busy"
DEFERRED = "deferred"

SPACE_KEYS_TTL_MS = fleet.SPACE_KEYS_TTL_MS

# KEYS[1] = lease key, ARGV[1] = expected value, ARGV[2] = ttl ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# Space leases. KEYS[1] = lease key, KEYS[2] = the Space's contexts SET, KEYS[3] = its waiting ZSET.
# ARGV[1] = lease value, ARGV[2] = ttl ms, ARGV[3] = cap, ARGV[4] = pk, ARGV[5] = now ms,
# ARGV[6] = lease key prefix, ARGV[7] = SPACE_KEYS_TTL_MS.  1 = taken, 0 = busy, -1 = deferred.
# A member is an instance pk (its lease: ARGV[6] .. pk) or ``cron:{match_pk}`` (its delivery
# lease: the cron prefix .. match_pk): ``fleet.LIVE_LUA``; the cap follows the live fleet's slots:
# ``fleet.CAP_LUA`` (fixed = TAKOHOST_SPACE_MAX_CONTEXTS, reserved = TAKOHOST_SPACE_RESERVED_SLOTS).
_LIVE = fleet.LIVE_LUA
# ... ARGV[8] = the delivery lease key prefix, ARGV[9] = reserved slots; KEYS[4] = the fleet's ZSET,
# KEYS[5] = the Space's sent ZSET (this message is taken now: it no longer counts as sent).
_ADMIT = _LIVE + fleet.CAP_LUA + """
redis.call('ZREM', KEYS[5], ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local cap = space_cap(tonumber(ARGV[3]), tonumber(ARGV[9]), KEYS[4], tonumber(ARGV[5]))
local live = 0
for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if member ~= ARGV[4] and live_member(member, ARGV[6], ARGV[8]) then
    live = live + 1
  else
    redis.call('SREM', KEYS[2], member)
  end
end
if live >= cap then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('ZREM', KEYS[3], ARGV[4])
return 1
"""
# KEYS[1] = lease key, KEYS[2] = contexts SET; ARGV[1] = value, ARGV[2] = ttl ms, ARGV[3] = pk,
# ARGV[4] = SPACE_KEYS_TTL_MS. Renew (or re-take a vanished lease) and stay counted in the Space.
_RENEW_SPACE = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  return 0
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""
# KEYS = lease, contexts SET, waiting ZSET, sent ZSET; ARGV[1] = value, ARGV[2] = pk, ARGV[3] = now
# ms, ARGV[4] = SPACE_KEYS_TTL_MS. {0} = not ours; {1} = released, nobody waits; {1, pk} =
# released, hand the slot to pk (whose message counts as sent from now on).
_RELEASE_SPACE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
local nxt = redis.call('ZPOPMIN', KEYS[3])
if nxt[1] then
  redis.call('ZADD', KEYS[4], ARGV[3], nxt[1])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
  return {1, nxt[1]}
end
return {1}
"""
# KEYS[1] = contexts SET; ARGV[1] = lease key prefix, ARGV[2] = delivery lease key prefix.
# Drop members without a lease; count the rest.
_RUNNING = _LIVE + """
local live = 0
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if live_member(member, ARGV[1], ARGV[2]) then
    live = live + 1
  else
    redis.call('SREM', KEYS[1], member)
  end
end
return live
"""
# KEYS[1] = delivery lease, KEYS[2] = contexts SET; ARGV[1] = value, ARGV[2] = ttl ms,
# ARGV[3] = member, ARGV[4] = SPACE_KEYS_TTL_MS. Renew a delivery lease if still ours (a vanished
# one is lost: see DeliveryLease) and keep it counted in its Space.
_RENEW_MEMBER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""

#: The member of a cron delivery in a Space's contexts SET and waiting ZSET: ``cron:{match_pk}``.
CRON_MEMBER = "cron:"


@dataclasses.dataclass(frozen=True)
class Lease:
    """One held lease: ``key`` in Redis holding ``value`` (``{owner}:{nonce}``); ``space`` is the
    Space whose cap it counts against (``None``: taken by :meth:`LeaseStore.acquire`, uncapped)."""

    instance_pk: int
    key: str
    value: str
    space: str | None = None

    @property
    def member(self) -> str:
        """Its member in its Space's contexts SET: the instance pk."""
        return str(self.instance_pk)


@dataclasses.dataclass(frozen=True)
class DeliveryLease:
    """A held cron delivery lease (``services.redis_keys.delivery_lease_key``): ``key`` holding
    ``value`` since the monotonic ``taken_at`` (just before it was taken); ``member`` is the
    match's member in Space SETs (``cron:{match_pk}``), ``space`` the Space whose slot it holds
    (``None``: uncapped).

    It is renewed like a replay context's lease, by the process's heartbeat
    (``workers.sandbox.heartbeat``, :meth:`LeaseStore.renew`; docs/spec/cron-trigger.md#cr-delivery
    at-least-once delivery), which pings the delivery's child only while the lease is fresh, so
    the child is dead (its watchdog) before this lease can expire: "no live lease" proves that
    no handler of the match runs. Released with :meth:`LeaseStore.release`.
    """

    key: str
    value: str
    member: str
    taken_at: float
    space: str | None = None


def process_owner() -> str:
    """This process's owner id: ``{hostname}:{pid}`` (new after ``fork``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LeaseStore:
    """Acquire, renew and release instance leases in one Redis.

    ``ttl_ms`` is the lease time-to-live in milliseconds (``settings.lease_ttl_ms``, 15000);
    the heartbeat renews every quarter of it. ``handoff(pk)`` is called with the waiting instance
    a released Space lease frees its slot for (``store_for`` wires ``services.dispatch.run_context``;
    ``None``: nobody is told, the sweep finds it). Redis errors propagate as ``redis.RedisError``.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        ttl_ms: int,
        handoff: Callable[[int], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.ttl_ms = ttl_ms
        self.handoff = handoff
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._admit = client.register_script(_ADMIT)
        self._renew_space = client.register_script(_RENEW_SPACE)
        self._release_space = client.register_script(_RELEASE_SPACE)
        self._running = client.register_script(_RUNNING)
        self._renew_member = client.register_script(_RENEW_MEMBER)

    def key(self, instance_pk: int) -> str:
        """The Redis key of ``instance_pk``'s lease."""
        return redis_keys.lease_key(self.namespace, instance_pk)

    def acquire(self, instance_pk: int, *, owner: str | None = None) -> Lease | None:
        """``SET key value NX PX ttl``: the new :class:`Lease`, or ``None`` if someone holds it."""
        value = f"{owner or process_owner()}:{uuid.uuid4().hex}"
        key = self.key(instance_pk)
        if self.client.set(key, value, nx=True, px=self.ttl_ms):
            return Lease(instance_pk=instance_pk, key=key, value=value)
        return None

    def admit(
        self, instance_pk: int, *, space: str | None, cap: int, reserved: int = 0, owner: str | None = None
    ) -> Lease | str:
        """Take ``instance_pk``'s lease and a slot of ``space`` in one round trip.

        Returns the new :class:`Lease` (``lease.space == space``); :data:`BUSY` when someone holds
        the lease (nothing recorded: that owner runs the instance); :data:`DEFERRED` when ``space``
        already runs ``cap`` contexts with live leases — nothing is taken and the pk is added to
        the Space's waiting ZSET (kept at its first deferral time), from which a release hands it
        the next free slot. ``space`` ``None`` or ``cap`` ≤ 0 → a plain :meth:`acquire` (no cap).
        ``cap`` is ``settings.space_max_contexts`` and ``reserved`` ``settings.space_reserved_slots``:
        the cap applied is ``services.fleet.space_cap`` of the live fleet's slots, read in the same
        script.
        """
        if space is None or cap <= 0:
            held = self.acquire(instance_pk, owner=owner)
            return BUSY if held is None else held
        value = f"{owner or process_owner()}:{uuid.uuid4().hex}"
        key = self.key(instance_pk)
        answer = self._take_slot(
            key=key, value=value, space=space, cap=cap, reserved=reserved, member=str(instance_pk)
        )
        if answer == 1:
            return Lease(instance_pk=instance_pk, key=key, value=value, space=space)
        return BUSY if answer == 0 else DEFERRED

    def _take_slot(self, *, key: str, value: str, space: str, cap: int, reserved: int, member: str) -> int:
        """Run ``_ADMIT`` for lease ``key`` and ``member`` of ``space``: 1 taken, 0 busy, -1 deferred."""
        return int(
            self._admit(
                keys=[
                    key,
                    self.contexts_key(space),
                    self.waiting_key(space),
                    redis_keys.fleet_slots_key(self.namespace),
                    redis_keys.space_sent_key(self.namespace, space),
                ],
                args=[
                    value,
                    self.ttl_ms,
                    cap,
                    member,
                    int(time.time() * 1000),
                    self.key_prefix(),
                    SPACE_KEYS_TTL_MS,
                    self.delivery_key_prefix(),
                    reserved,
                ],
            )
        )

    def admit_delivery(
        self, match_pk: int, *, space: str | None, cap: int, reserved: int = 0
    ) -> DeliveryLease | str:
        """Take cron match ``match_pk``'s delivery lease and a slot of ``space`` in one round trip
        (the same script and cap as :meth:`admit`; the slot's member is ``cron:{match_pk}``).

        Returns the :class:`DeliveryLease` (renewed by the caller's heartbeat,
        ``workers.sandbox.heartbeat``, through :meth:`renew`); :data:`BUSY` when another delivery
        holds the lease; :data:`DEFERRED` when ``space`` runs ``cap`` contexts and deliveries
        already (the member waits in the Space's ZSET, and a release hands it the next free slot
        through ``services.dispatch.deliver_cron_match``; the cron sweep sends the match again
        anyway). ``space`` ``None`` or ``cap`` ≤ 0 → a plain ``SET NX PX`` (no slot). Raises
        ``redis.RedisError``.
        """
        key = redis_keys.delivery_lease_key(self.namespace, match_pk)
        value = f"{process_owner()}:{uuid.uuid4().hex}"
        member = f"{CRON_MEMBER}{match_pk}"
        started = time.monotonic()
        if space is None or cap <= 0:
            if not self.client.set(key, value, nx=True, px=self.ttl_ms):
                return BUSY
            return DeliveryLease(key=key, value=value, member=member, taken_at=started)
        answer = self._take_slot(key=key, value=value, space=space, cap=cap, reserved=reserved, member=member)
        if answer != 1:
            return BUSY if answer == 0 else DEFERRED
        return DeliveryLease(key=key, value=value, member=member, taken_at=started, space=space)

    def renew(self, lease: Lease | DeliveryLease) -> bool:
        """Extend ``lease`` by the TTL if it is still ours (compare-and-set); False if it is not.

        A context's lease that vanished (expired, or Redis lost its keys) is taken again with
        ``SET NX`` under the same value, so a flushed Redis does not stop a healthy context; one
        that another owner holds is lost for good. A cron delivery's lease that vanished is lost
        too (the sweep may have finished its delivery ``unknown`` and sent the match again). A
        Space's lease is also (re-)counted in its Space (the same single round trip).
        """
        if isinstance(lease, DeliveryLease):
            if lease.space is None:
                return bool(self._renew(keys=[lease.key], args=[lease.value, self.ttl_ms]))
            return bool(
                self._renew_member(
                    keys=[lease.key, self.contexts_key(lease.space)],
                    args=[lease.value, self.ttl_ms, lease.member, SPACE_KEYS_TTL_MS],
                )
            )
        if lease.space is not None:
            return bool(
                self._renew_space(
                    keys=[lease.key, self.contexts_key(lease.space)],
                    args=[lease.value, self.ttl_ms, lease.instance_pk, SPACE_KEYS_TTL_MS],
                )
            )
        if self._renew(keys=[lease.key], args=[lease.value, self.ttl_ms]):
            return True
        return bool(self.client.set(lease.key, lease.value, nx=True, px=self.ttl_ms))

    def release(self, lease: Lease | DeliveryLease) -> bool:
        """Delete ``lease`` if it is still ours; True when this call deleted it.

        A Space's lease also frees its slot and, in the same script, pops the Space's oldest
        waiting member, which is handed the slot (:meth:`release_slot`; a failing hand-off is
        logged, never raised: the sweeps dispatch it later).
        """
        if lease.space is None:
            return bool(self._release(keys=[lease.key], args=[lease.value]))
        return self.release_slot(key=lease.key, value=lease.value, space=lease.space, member=lease.member)

    def release_slot(self, *, key: str, value: str, space: str, member: str) -> bool:
        """Delete lease ``key`` if it still holds ``value``, free ``member``'s slot of ``space``
        and hand the slot to the Space's oldest waiting member: an instance pk through
        ``handoff``, a ``cron:{match_pk}`` through ``services.dispatch.deliver_cron_match`` (a
        failing hand-off is logged, never raised: the sweeps send it later). True when this call
        deleted the lease."""
        answer = self._release_space(
            keys=[key, self.contexts_key(space), self.waiting_key(space),
                  redis_keys.space_sent_key(self.namespace, space)],
            args=[value, member, int(time.time() * 1000), SPACE_KEYS_TTL_MS],
        )
        if len(answer) > 1:
            waiting = answer[1].decode() if isinstance(answer[1], bytes) else str(answer[1])
            try:
                if waiting.startswith(CRON_MEMBER):
                    dispatch.deliver_cron_match(int(waiting.removeprefix(CRON_MEMBER)))
                elif self.handoff is not None:
                    self.handoff(int(waiting))
            except Exception:  # noqa: BLE001 - the sweep dispatches it
                log.warning("hand-off failed; left to the sweep", extra={"space": space}, exc_info=True)
        return bool(int(answer[0]))

    def space_cap(self, fixed: int, *, reserved: int) -> int:
        """The per-Space cap now, from ``fixed`` (``settings.space_max_contexts``), ``reserved``
        (``settings.space_reserved_slots``) and the live fleet's slots (``services.fleet.space_cap``;
        what :meth:`admit` applies). Raises ``redis.RedisError``."""
        if fixed <= 0 or reserved <= 0:
            return fixed
        slots = fleet.live_slots(self.client, namespace=self.namespace)
        return fleet.space_cap(fixed=fixed, live_slots=slots, reserved=reserved)

    def running(self, spaces: Iterable[str]) -> dict[str, int]:
        """How many contexts each of ``spaces`` runs now (live leases in its contexts SET; stale
        members are dropped on the way). One pipelined round trip."""
        names = list(dict.fromkeys(spaces))
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for space in names:
            self._running(
                keys=[self.contexts_key(space)], args=[self.key_prefix(), self.delivery_key_prefix()], client=pipe
            )
        return {space: int(live) for space, live in zip(names, pipe.execute(), strict=True)}

    def note_waiting(self, waiting: Mapping[str, Sequence[int]]) -> None:
        """Record ``{space: [pk, ...]}`` as deferred (kept at an earlier deferral time if already
        there), so that releases hand them slots: the sweep's repair after Redis lost the ZSET.
        One pipelined round trip."""
        if not any(waiting.values()):
            return
        now_ms = int(time.time() * 1000)
        pipe = self.client.pipeline(transaction=False)
        for space, pks in waiting.items():
            if pks:
                key = self.waiting_key(space)
                pipe.zadd(key, {str(pk): now_ms for pk in pks}, nx=True)
                pipe.pexpire(key, SPACE_KEYS_TTL_MS)
        pipe.execute()

    def key_prefix(self) -> str:
        """The prefix of every lease key (``{namespace}:lease:``): the key is prefix + pk."""
        return redis_keys.lease_key(self.namespace, 0)[:-1]

    def delivery_key_prefix(self) -> str:
        """The prefix of every cron delivery lease key (``{namespace}:cronlease:``)."""
        return redis_keys.delivery_lease_key(self.namespace, 0)[:-1]

    def contexts_key(self, space: str) -> str:
        """The Redis SET of ``space``'s running contexts (``redis_keys.space_contexts_key``)."""
        return redis_keys.space_contexts_key(self.namespace, space)

    def waiting_key(self, space: str) -> str:
        """The Redis ZSET of ``space``'s deferred instances (``redis_keys.space_waiting_key``)."""
        return redis_keys.space_waiting_key(self.namespace, space)

    def holder(self, instance_pk: int) -> str | None:
        """The current lease value of ``instance_pk`` (``None``: no live lease)."""
        value = self.client.get(self.key(instance_pk))
        if value is None or isinstance(value, str):
            return value
        return value.decode("utf-8", "replace")


_stores: dict[tuple[int, str, str, int], LeaseStore] = {}


def _dispatch_next(instance_pk: int) -> None:
    # Looked up at call time, so that tests replacing ``dispatch.run_context`` see hand-offs too.
    dispatch.run_context(instance_pk)


def store_for(*, redis_url: str, namespace: str, ttl_ms: int) -> LeaseStore:
    """This process's :class:`LeaseStore` for the given settings (a new client after ``fork``);
    released Space leases hand their slot on through ``services.dispatch.run_context``."""
    key = (os.getpid(), redis_url, namespace, ttl_ms)
    store = _stores.get(key)
    if store is None:
        store = _stores[key] = LeaseStore(
            redis_client.client(redis_url), namespace=namespace, ttl_ms=ttl_ms, handoff=_dispatch_next
        )
    return store


def store_for_settings(settings: config.Settings) -> LeaseStore:
    """:func:`store_for` of ``settings`` (its Redis, namespace and lease TTL)."""
    return store_for(redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms)
