"""Stop requests to the workers that own instances (docs/spec/architecture.md#ar-terminate "Terminate and delete" step 2).

A terminate or a DurableWorkflow DELETE first fences the owner in Postgres (epoch bump); then it
publishes the instance pks on the Redis channel ``{namespace}:stop``. Every worker process whose
heartbeat watches one of them beats at once (``workers.sandbox.heartbeat``): it reads the bumped
epoch, kills the child, proves it dead, and the context drops its lease — so the caller, which
waits for the lease to go, answers in a fraction of a second instead of a heartbeat period.

The message is only a hint: a lost message (Redis down, a subscriber reconnecting) costs speed,
never safety — the heartbeat reads every watched epoch each period anyway, and a frozen worker's
child is killed by its own watchdog before the lease expires.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from core import config
from services import redis_client

log = logging.getLogger(__name__)


def channel(namespace: str) -> str:
    """The stop channel of a host namespace: ``{namespace}:stop``."""
    return f"{namespace}:stop"


def encode(instance_pks: Sequence[int]) -> str:
    """The message body: the pks, comma-separated (``"12,13"``)."""
    return ",".join(str(int(pk)) for pk in instance_pks)


def decode(data: bytes | str) -> set[int]:
    """The pks of a message body; malformed parts are ignored (it is only a hint)."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    pks = set()
    for part in text.split(","):
        part = part.strip()
        if part.isascii() and part.isdigit():
            pks.add(int(part))
    return pks


def publish(instance_pks: Sequence[int], *, settings: config.Settings | None = None) -> None:
    """Ask the owners of ``instance_pks`` to check their fence now (after the fence committed).
    Never raises: a lost hint only delays the stop until the next heartbeat."""
    if not instance_pks:
        return
    settings = settings or config.load_settings()
    try:
        client = redis_client.client(settings.redis_url)
        for start in range(0, len(instance_pks), 500):
            client.publish(channel(settings.namespace), encode(instance_pks[start : start + 500]))
    except redis.RedisError:
        log.warning("stop hint not published; the heartbeat will notice the fence", exc_info=True)
