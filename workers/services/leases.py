"""Stop proofs from replay-context leases in Redis (CONTRACT §8, DESIGN "Terminate and delete").

A worker owns an instance while it holds the key ``{namespace}:lease:{pk}`` (:func:`lease_key`;
taken, renewed and dropped by ``workers.engine.lease``, which also keeps the per-Space sets named
by :func:`space_contexts_key` and :func:`space_waiting_key`). The owner drops it only after its child is
proven dead, and a child whose pings stop kills itself before the lease could expire, so "no live
lease" means "no user code of this instance runs": :func:`live_leases` is how terminate, the
DurableWorkflow DELETE and the beat sweep prove a stop. This module must not import
``workers.engine`` (the API imports it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import redis

from models.errors import DomainError
from takohost import config


def lease_key(namespace: str, instance_pk: int) -> str:
    """The Redis key of an instance's replay-context lease: ``{namespace}:lease:{pk}``."""
    return f"{namespace}:lease:{instance_pk}"


def space_contexts_key(namespace: str, space: str) -> str:
    """The Redis SET of the instance pks whose leases a Space's running contexts hold (the
    per-Space cap, ``workers.engine.lease``): ``{namespace}:space-contexts:{space}``. A member
    counts only while its lease key exists."""
    return f"{namespace}:space-contexts:{space}"


def space_waiting_key(namespace: str, space: str) -> str:
    """The Redis ZSET of a Space's deferred instance pks (score: milliseconds since the epoch
    when first deferred): ``{namespace}:space-waiting:{space}``."""
    return f"{namespace}:space-waiting:{space}"


_redis_clients: dict[tuple[int, str], redis.Redis] = {}


def _redis(settings: config.Settings) -> redis.Redis:
    key = (os.getpid(), settings.redis_url)
    client = _redis_clients.get(key)
    if client is None:
        client = _redis_clients[key] = redis.Redis.from_url(
            settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )
    return client


def live_leases(instance_pks: Sequence[int], *, settings: config.Settings | None = None) -> set[int]:
    """The subset of ``instance_pks`` that hold a live lease in Redis (one pipelined round trip).

    Raises ``DomainError("backend_unavailable")`` when Redis cannot be reached: without it no stop
    can be proven.
    """
    if not instance_pks:
        return set()
    settings = settings or config.load_settings()
    try:
        pipe = _redis(settings).pipeline(transaction=False)
        for pk in instance_pks:
            pipe.exists(lease_key(settings.namespace, pk))
        found = pipe.execute()
    except redis.RedisError as exc:
        raise DomainError("backend_unavailable", f"the lease store is unreachable: {exc}") from None
    return {pk for pk, live in zip(instance_pks, found, strict=True) if live}
