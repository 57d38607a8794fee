"""A create of a Space already at its cap sends no message: it is recorded as deferred and handed
the next slot that Space releases (``services.fleet.defer_dispatch``; docs/spec/host-features.md#hf-neighbours). Real Redis."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from core import config
from services import fleet, redis_client, redis_keys
from workers.sandbox import lease as lease_mod


@pytest.fixture()
def settings():
    s = dataclasses.replace(config.load_settings(), namespace=f"tkf{uuid.uuid4().hex[:10]}")
    yield s
    client = redis_client.client(s.redis_url)
    keys = list(client.scan_iter(match=f"{s.namespace}:*"))
    if keys:
        client.delete(*keys)


def test_a_dispatch_over_the_cap_is_recorded_as_waiting_and_handed_the_next_slot(settings):
    client = redis_client.client(settings.redis_url)
    registration = fleet.Registration(client, namespace=settings.namespace, slots=2, ttl_ms=60_000)
    registration._renew()  # takohost dev's two slots: the cap is 1
    handed: list[int] = []
    store = lease_mod.LeaseStore(client, namespace=settings.namespace, ttl_ms=60_000, handoff=handed.append)
    held = store.admit(1, space="a", cap=settings.space_max_contexts, reserved=settings.space_reserved_slots)
    assert isinstance(held, lease_mod.Lease)

    assert fleet.defer_dispatch(2, space="a", settings=settings) is True  # nothing is sent
    assert fleet.defer_dispatch(3, space="a", settings=settings) is True
    waiting = client.zrange(redis_keys.space_waiting_key(settings.namespace, "a"), 0, -1)
    assert waiting == [b"2", b"3"]
    assert fleet.defer_dispatch(4, space="b", settings=settings) is False  # another Space: sent
    off = dataclasses.replace(settings, space_max_contexts=0)
    assert fleet.defer_dispatch(5, space="a", settings=off) is False  # fair share off: sent

    assert store.release(held)
    assert handed == [2]  # the oldest deferred one gets the slot, with no message of its own queued
    registration.stop()
    # Nothing registered any more: the fixed cap (8) alone, and Space a runs nothing now.
    assert fleet.defer_dispatch(6, space="a", settings=settings) is False


def test_an_unreachable_redis_sends_the_message(settings):
    down = dataclasses.replace(settings, redis_url="redis://127.0.0.1:1/0")
    assert fleet.defer_dispatch(1, space="a", settings=down) is False


def test_a_burst_on_an_idle_space_sends_only_the_cap_s_worth_of_messages(settings):
    """Messages sent and not yet taken by a worker count against the cap (for one lease TTL): a
    burst of creates on an idle Space does not fill the queue in front of other Spaces' work."""
    client = redis_client.client(settings.redis_url)
    fleet.Registration(client, namespace=settings.namespace, slots=2, ttl_ms=60_000)._renew()  # cap 1
    handed: list[int] = []
    store = lease_mod.LeaseStore(client, namespace=settings.namespace, ttl_ms=60_000, handoff=handed.append)
    assert fleet.defer_dispatch(10, space="a", settings=settings) is False  # sent
    assert fleet.defer_dispatch(10, space="a", settings=settings) is False  # the same one again: sent
    assert [fleet.defer_dispatch(pk, space="a", settings=settings) for pk in (11, 12)] == [True, True]
    held = store.admit(10, space="a", cap=settings.space_max_contexts, reserved=settings.space_reserved_slots)
    assert isinstance(held, lease_mod.Lease)  # the worker took it: it counts as running now
    assert fleet.defer_dispatch(13, space="a", settings=settings) is True
    assert store.release(held) and handed == [11]  # 11's hand-off counts as sent until taken
    assert fleet.defer_dispatch(14, space="a", settings=settings) is True

    short = dataclasses.replace(settings, lease_ttl_ms=50)
    assert fleet.defer_dispatch(20, space="c", settings=short) is False
    assert fleet.defer_dispatch(21, space="c", settings=short) is True
    time.sleep(0.1)  # 20's message was lost (no worker took it): it stops counting after a TTL
    assert fleet.defer_dispatch(22, space="c", settings=short) is False
