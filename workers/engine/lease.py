"""Replay-context leases in Redis (CONTRACT §1, DESIGN "One replay context" step 2).

A lease says which worker process owns an instance right now: key
``{namespace}:lease:{instance_pk}`` (``workers.services.leases.lease_key``), value
``{owner}:{nonce}``, set with ``SET NX PX ttl`` and renewed by the heartbeat with a
compare-and-set script, so a process only ever extends or deletes its own lease. The lease is
an efficiency and stop-proof device, not the safety device: commits are fenced by the instance
epoch in Postgres (``store``), so two owners at once (after a Redis flush, say) can waste work
but never both commit.

Stop proof: the owner deletes its lease only after its child is proven dead, and a child whose
pings stop kills itself before the lease could expire (``watchdog_seconds`` < TTL), so "no lease"
means "no user code of this instance runs" (DESIGN "Terminate and delete").
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid

import redis

from workers.services import leases

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


@dataclasses.dataclass(frozen=True)
class Lease:
    """One held lease: ``key`` in Redis holding ``value`` (``{owner}:{nonce}``)."""

    instance_pk: int
    key: str
    value: str


def process_owner() -> str:
    """This process's owner id: ``{hostname}:{pid}`` (new after ``fork``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LeaseStore:
    """Acquire, renew and release instance leases in one Redis.

    ``ttl_ms`` is the lease time-to-live in milliseconds (``settings.lease_ttl_ms``, 15000);
    the heartbeat renews every third of it. Redis errors propagate as ``redis.RedisError``.
    """

    def __init__(self, client: redis.Redis, *, namespace: str, ttl_ms: int) -> None:
        self.client = client
        self.namespace = namespace
        self.ttl_ms = ttl_ms
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def key(self, instance_pk: int) -> str:
        """The Redis key of ``instance_pk``'s lease."""
        return leases.lease_key(self.namespace, instance_pk)

    def acquire(self, instance_pk: int, *, owner: str | None = None) -> Lease | None:
        """``SET key value NX PX ttl``: the new :class:`Lease`, or ``None`` if someone holds it."""
        value = f"{owner or process_owner()}:{uuid.uuid4().hex}"
        key = self.key(instance_pk)
        if self.client.set(key, value, nx=True, px=self.ttl_ms):
            return Lease(instance_pk=instance_pk, key=key, value=value)
        return None

    def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by the TTL if it is still ours (compare-and-set); False if it is not.

        A lease that vanished (expired, or Redis lost its keys) is taken again with ``SET NX``
        under the same value, so a flushed Redis does not stop a healthy context; one that
        another owner holds is lost for good.
        """
        if self._renew(keys=[lease.key], args=[lease.value, self.ttl_ms]):
            return True
        return bool(self.client.set(lease.key, lease.value, nx=True, px=self.ttl_ms))

    def release(self, lease: Lease) -> bool:
        """Delete ``lease`` if it is still ours; True when this call deleted it."""
        return bool(self._release(keys=[lease.key], args=[lease.value]))

    def holder(self, instance_pk: int) -> str | None:
        """The current lease value of ``instance_pk`` (``None``: no live lease)."""
        value = self.client.get(self.key(instance_pk))
        return None if value is None else value.decode("utf-8", "replace")


_stores: dict[tuple[int, str, str, int], LeaseStore] = {}


def store_for(*, redis_url: str, namespace: str, ttl_ms: int) -> LeaseStore:
    """This process's :class:`LeaseStore` for the given settings (a new client after ``fork``)."""
    key = (os.getpid(), redis_url, namespace, ttl_ms)
    store = _stores.get(key)
    if store is None:
        client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        store = _stores[key] = LeaseStore(client, namespace=namespace, ttl_ms=ttl_ms)
    return store
