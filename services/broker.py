"""The Redis broker transport of the Celery app: kombu's, with one publishing client per channel
(docs/spec/host-features.md#hf-performance: lean publish path).

kombu's Redis channel builds a new ``redis.Redis`` client object for every message it publishes
(``Channel._create_client``; the socket comes from the channel's connection pool either way).
Building it costs about 0.17 ms of CPU per publish here (microbenchmark: 0.61 →
0.44 ms CPU per ``send_task``), on the API's create path and on every dispatch of the workers. A
``redis.Redis`` over a connection pool is thread-safe (each command checks a connection out of the
pool), so one client per channel is reused; the asynchronous client (the consumer's BRPOP) is
kombu's own, untouched.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """kombu's Redis channel; its synchronous (publishing) client is built once."""

    _publish_client = None

    def _create_client(self, asynchronous: bool = False):  # noqa: ANN202 - kombu API
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._publish_client
        if client is None:
            client = self._publish_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """The ``broker_transport`` setting for ``broker_url``: this module's transport for a Redis
    URL (``redis://``, ``rediss://``, ``redis+socket://``), else ``None`` (kombu picks by scheme)."""
    return f"{__name__}:Transport" if broker_url.split("://", 1)[0] in ("redis", "rediss", "redis+socket") else None
