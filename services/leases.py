"""Stop proofs from replay-context leases in Redis (docs/spec/host-limits.md#hl-decisions, docs/spec/architecture.md#ar-terminate "Terminate and delete").

A worker owns an instance while it holds the key ``{namespace}:lease:{pk}``
(``services.redis_keys.lease_key``; taken, renewed and dropped by ``workers.sandbox.lease``, which
also keeps the per-Space sets). The owner drops it only after its child is
proven dead, and a child whose pings stop kills itself before the lease could expire, so "no live
lease" means "no user code of this instance runs": :func:`live_leases` is how terminate, the
DurableWorkflow DELETE and the beat sweep prove a stop. This module must not import
``workers.engine`` (the API imports it).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from core import config
from models.errors import DomainError
from services import redis_client, redis_keys


def live_leases(instance_pks: Sequence[int], *, settings: config.Settings | None = None) -> set[int]:
    """The subset of ``instance_pks`` that hold a live lease in Redis (one pipelined round trip).

    Raises ``DomainError("backend_unavailable")`` when Redis cannot be reached: without it no stop
    can be proven.
    """
    if not instance_pks:
        return set()
    settings = settings or config.load_settings()
    try:
        pipe = redis_client.client(settings.redis_url).pipeline(transaction=False)
        for pk in instance_pks:
            pipe.exists(redis_keys.lease_key(settings.namespace, pk))
        found = pipe.execute()
    except redis.RedisError as exc:
        raise DomainError("backend_unavailable", f"the lease store is unreachable: {exc}") from None
    return {pk for pk, live in zip(instance_pks, found, strict=True) if live}
