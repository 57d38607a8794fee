"""Leases on the real Redis: expiry, the namespace prefix, and the stop proof the services read."""

from __future__ import annotations

import time
import uuid

from core import config
from services import leases as lease_service
from workers.sandbox import lease as lease_mod


def test_leases_expire_and_live_leases_sees_them():
    settings = config.load_settings()
    leases = lease_mod.store_for(redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=300)
    pk = int(uuid.uuid4().int % 10**9)
    held = leases.acquire(pk)
    try:
        assert held.key == f"{settings.namespace}:lease:{pk}"
        assert lease_service.live_leases([pk, pk + 1], settings=settings) == {pk}
        assert leases.acquire(pk) is None
        time.sleep(0.5)  # not renewed: expired
        assert lease_service.live_leases([pk], settings=settings) == set()
        again = leases.acquire(pk)
        assert again is not None and again.value != held.value
        assert not leases.renew(held)  # the old owner cannot take it back
        assert leases.holder(pk) == again.value
    finally:
        leases.client.delete(f"{settings.namespace}:lease:{pk}")
