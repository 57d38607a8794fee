"""The names of this host's Redis keys and channels (docs/spec/architecture.md#ar-shape, docs/spec/architecture.md#ar-lease "Leases"); no I/O.

Every key starts with the host's ``namespace`` (``Settings.namespace``), so several hosts or test
sessions can share one Redis. Both the engine (which takes and renews the leases) and the
services (which prove stops from them, and are imported by the API) name keys through here.
"""

from __future__ import annotations


def lease_key(namespace: str, instance_pk: int) -> str:
    """The Redis key of an instance's replay-context lease: ``{namespace}:lease:{pk}``."""
    return f"{namespace}:lease:{instance_pk}"


def running_step_key(namespace: str, instance_pk: int) -> str:
    """The Redis key where the heartbeat publishes the step attempt a context's child is running
    (``{"name", "attempt", "since", "epoch"}``, JSON, expiring with the lease TTL) for the
    progress view: ``{namespace}:step:{pk}``."""
    return f"{namespace}:step:{instance_pk}"


def delivery_lease_key(namespace: str, match_pk: int) -> str:
    """The Redis key of a cron match's delivery lease: ``{namespace}:cronlease:{match_pk}``."""
    return f"{namespace}:cronlease:{match_pk}"


def space_contexts_key(namespace: str, space: str) -> str:
    """The Redis SET of the instance pks whose leases a Space's running contexts hold (the
    per-Space cap, ``workers.sandbox.lease``): ``{namespace}:space-contexts:{space}``. A member
    counts only while its lease key exists."""
    return f"{namespace}:space-contexts:{space}"


def space_waiting_key(namespace: str, space: str) -> str:
    """The Redis ZSET of a Space's deferred instance pks (score: milliseconds since the epoch
    when first deferred): ``{namespace}:space-waiting:{space}``."""
    return f"{namespace}:space-waiting:{space}"


def fleet_slots_key(namespace: str) -> str:
    """The Redis ZSET of the live fleet's tenant-work slots (``services.fleet``): member
    ``{owner}|{slots}``, score the millisecond time the entry lapses: ``{namespace}:fleet-slots``."""
    return f"{namespace}:fleet-slots"


def space_sent_key(namespace: str, space: str) -> str:
    """The Redis ZSET of a Space's instance pks whose context message was sent and not yet taken
    by a worker (score: milliseconds since the epoch when sent; ``services.fleet.defer_dispatch``
    counts them against the cap, the admission removes them): ``{namespace}:space-sent:{space}``."""
    return f"{namespace}:space-sent:{space}"
