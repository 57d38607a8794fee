"""This process's Redis client (one per URL and process; a new one after ``fork``).

Leases, stop proofs, stop hints and cron delivery leases all talk to Redis through
:func:`client`, so a process holds one connection pool per Redis URL. Socket and connect
timeouts are ``TIMEOUT_S`` seconds: a Redis that does not answer raises ``redis.RedisError``
instead of hanging the caller.
"""

from __future__ import annotations

import os
import threading

import redis

#: Socket and connect timeout of every client, in seconds.
TIMEOUT_S = 5

_clients: dict[tuple[int, str], redis.Redis] = {}
_lock = threading.Lock()


def client(url: str) -> redis.Redis:
    """The Redis client of this process for ``url`` (``redis://…`` or ``unix://…``)."""
    key = (os.getpid(), url)
    found = _clients.get(key)
    if found is None:
        with _lock:
            found = _clients.get(key)
            if found is None:
                found = _clients[key] = redis.Redis.from_url(
                    url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
                )
    return found
