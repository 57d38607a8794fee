"""The live fleet's worker slots in Redis, so that the per-Space cap follows them (docs/spec/host-features.md#hf-neighbours;
docs/spec/host-limits.md#hl-decisions "Fair share and quotas"; docs/operations.md "Production", fair share).

Every process that consumes the tenant-work queue (``Settings.queue``: replay contexts and cron
deliveries) registers its slots in the ZSET ``{namespace}:fleet-slots``
(``redis_keys.fleet_slots_key``): member ``{owner}|{slots}`` (``owner`` is
``{hostname}:{pid}:{nonce}``), score the millisecond time at which the entry lapses. A daemon
thread renews it every quarter of ``Settings.lease_ttl_ms`` and the entry lapses one TTL after its
last renewal, so a worker that joins counts within a renewal and one that is SIGKILLed stops
counting within a TTL (as its leases do); a clean stop removes it at once. The control-plane and
validation processes run no tenant work and do not register.

``workers.sandbox.lease`` reads the ZSET inside its admission script (:data:`CAP_LUA`: one round
trip, no extra call); :func:`space_cap` is the same rule in Python, for the beat sweep. And
:func:`defer_dispatch` keeps a create's message out of the FIFO queue while its Space already runs
its cap (the API calls it through ``services.dispatch.run_context``): a flood of one Space's
creates then never stands between another Space's create and a free slot.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import redis

from core import config
from services import redis_client, redis_keys

log = logging.getLogger(__name__)

#: Share of the lease TTL between two renewals of a process's entry.
RENEW_FRACTION = 0.25

#: How long (ms) a Space's contexts SET and waiting ZSET live after their last write: a Space
#: that went idle leaves no keys behind for long; a live one refreshes them at every admission.
SPACE_KEYS_TTL_MS = 86_400_000

#: Lua: ``live_member(member, lease_prefix, cron_prefix)``: whether a member of a Space's contexts
#: SET still holds its lease (an instance pk: ``lease_prefix .. pk``; ``cron:{match_pk}``: its
#: delivery lease ``cron_prefix .. match_pk``). Prepended to the scripts that count members.
LIVE_LUA = """
local function live_member(member, lease_prefix, cron_prefix)
  if string.sub(member, 1, 5) == 'cron:' then
    return redis.call('EXISTS', cron_prefix .. string.sub(member, 6)) == 1
  end
  return redis.call('EXISTS', lease_prefix .. member) == 1
end
"""
#: Lua: ``space_cap(fixed, reserved, fleet_key, now_ms)``, :func:`space_cap` over the live entries
#: of the fleet's ZSET (lapsed ones are dropped).
CAP_LUA = """
local function space_cap(fixed, reserved, fleet, now)
  if fixed <= 0 then return 0 end
  if reserved <= 0 then return fixed end
  redis.call('ZREMRANGEBYSCORE', fleet, '-inf', now)
  local slots = 0
  for _, member in ipairs(redis.call('ZRANGE', fleet, 0, -1)) do
    slots = slots + (tonumber(string.match(member, '|(%d+)$')) or 0)
  end
  if slots <= 0 then return fixed end
  return math.max(1, math.min(fixed, slots - reserved))
end
"""
# KEYS = the Space's contexts SET, its waiting ZSET, the fleet's ZSET, its sent ZSET; ARGV[1] =
# fixed cap, ARGV[2] = reserved, ARGV[3] = now ms, ARGV[4] = pk, ARGV[5] = lease prefix, ARGV[6] =
# delivery lease prefix, ARGV[7] = SPACE_KEYS_TTL_MS, ARGV[8] = how long (ms) a sent message counts.
# 1 = recorded as waiting (send nothing), 0 = send (and counted as sent).
_DEFER = LIVE_LUA + CAP_LUA + """
local cap = space_cap(tonumber(ARGV[1]), tonumber(ARGV[2]), KEYS[3], tonumber(ARGV[3]))
if cap <= 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', tonumber(ARGV[3]) - tonumber(ARGV[8]))
local taken = redis.call('ZCARD', KEYS[4])
if redis.call('ZSCORE', KEYS[4], ARGV[4]) then taken = taken - 1 end
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if live_member(member, ARGV[5], ARGV[6]) then taken = taken + 1 end
end
if taken >= cap then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
  return 1
end
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[7])
return 0
"""


def space_cap(*, fixed: int, live_slots: int, reserved: int) -> int:
    """How many contexts and cron deliveries one Space may run at once, fleet-wide.

    ``fixed`` is ``TAKOHOST_SPACE_MAX_CONTEXTS`` (``0``: no cap at all → ``0``), ``live_slots``
    the live fleet's registered slots (``0``: nothing registered, e.g. contexts run in a test
    process → ``fixed``), ``reserved`` ``TAKOHOST_SPACE_RESERVED_SLOTS`` (slots one Space never
    takes; ``0`` → ``fixed``). Otherwise ``max(1, min(fixed, live_slots - reserved))``: on 2
    slots 1, on 4 slots 3, on 100 slots ``fixed``. Pure; ``workers.sandbox.lease._CAP`` is the same
    rule in Lua."""
    if fixed <= 0:
        return 0
    if live_slots <= 0 or reserved <= 0:
        return fixed
    return max(1, min(fixed, live_slots - reserved))


def defer_dispatch(instance_pk: int, *, space: str, settings: config.Settings | None = None) -> bool:
    """Record instance ``instance_pk`` of ``space`` as waiting instead of sending its context's
    message, when ``space`` already takes its cap (:func:`space_cap`): contexts with live leases
    plus messages sent within a lease TTL that no worker has taken yet (a burst of creates on an
    idle Space sends only the cap's worth); True when recorded (the caller sends nothing: the next context of that Space to release its
    slot hands it on, ``workers.sandbox.lease``; a lost hand-off is the beat sweep's). False: send
    it (under the cap, fair share off, or Redis unreachable — the worker's admission decides then).
    One round trip; never raises.

    Safe against the release it races: the count and the record are one script, as the release's
    pop is, so a Space counted at its cap has a live lease whose release pops the record later."""
    settings = settings or config.load_settings()
    if settings.space_max_contexts <= 0:
        return False
    client = redis_client.client(settings.redis_url)
    try:
        script = _scripts.get(id(client))
        if script is None:
            script = _scripts[id(client)] = client.register_script(_DEFER)
        return bool(
            script(
                keys=[
                    redis_keys.space_contexts_key(settings.namespace, space),
                    redis_keys.space_waiting_key(settings.namespace, space),
                    redis_keys.fleet_slots_key(settings.namespace),
                    redis_keys.space_sent_key(settings.namespace, space),
                ],
                args=[
                    settings.space_max_contexts,
                    settings.space_reserved_slots,
                    int(time.time() * 1000),
                    instance_pk,
                    redis_keys.lease_key(settings.namespace, 0)[:-1],
                    redis_keys.delivery_lease_key(settings.namespace, 0)[:-1],
                    SPACE_KEYS_TTL_MS,
                    settings.lease_ttl_ms,
                ],
            )
        )
    except redis.RedisError:
        log.warning("fair-share check failed; the message is sent", extra={"space": space}, exc_info=True)
        return False


_scripts: dict[int, Any] = {}


def live_slots(client: redis.Redis, *, namespace: str, now_ms: int | None = None) -> int:
    """The slots of the fleet's live entries (lapsed ones are dropped on the way). Raises
    ``redis.RedisError``."""
    key = redis_keys.fleet_slots_key(namespace)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pipe = client.pipeline(transaction=False)
    pipe.zremrangebyscore(key, "-inf", now_ms)
    pipe.zrange(key, 0, -1)
    members = pipe.execute()[1]
    return sum(_slots_of(m) for m in members)


def _slots_of(member: bytes | str) -> int:
    text = member.decode() if isinstance(member, bytes) else member
    try:
        return max(0, int(text.rsplit("|", 1)[1]))
    except (IndexError, ValueError):
        return 0


class Registration:
    """This process's entry in the fleet's slots ZSET, renewed by a daemon thread until
    :meth:`stop` (also run at exit). ``slots`` ≥ 1; ``ttl_ms`` is the lease TTL."""

    def __init__(self, client: redis.Redis, *, namespace: str, slots: int, ttl_ms: int) -> None:
        self.client = client
        self.key = redis_keys.fleet_slots_key(namespace)
        self.member = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}|{int(slots)}"
        self.ttl_ms = ttl_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-slots", daemon=True)

    def start(self) -> Registration:
        """Register now (a Redis error is logged; the thread tries again) and keep renewing."""
        self._renew()
        self._thread.start()
        atexit.register(self.stop)
        return self

    def _renew(self) -> None:
        try:
            self.client.zadd(self.key, {self.member: int(time.time() * 1000) + self.ttl_ms})
            self.client.pexpire(self.key, max(self.ttl_ms * 4, 60_000))
        except redis.RedisError:
            log.warning("fleet slot registration failed; retried", exc_info=True)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_ms * RENEW_FRACTION / 1000):
            self._renew()

    def stop(self) -> None:
        """Stop renewing and remove the entry (never raises)."""
        self._stop.set()
        try:
            self.client.zrem(self.key, self.member)
        except redis.RedisError:
            log.warning("fleet slot entry not removed; it lapses", exc_info=True)


def register(*, slots: int, settings: config.Settings | None = None) -> Registration:
    """Register this process's ``slots`` tenant-work slots for as long as it lives (``takohost
    worker`` calls it in each process that consumes ``settings.queue``)."""
    settings = settings or config.load_settings()
    return Registration(
        redis_client.client(settings.redis_url),
        namespace=settings.namespace,
        slots=slots,
        ttl_ms=settings.lease_ttl_ms,
    ).start()
