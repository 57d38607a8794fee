"""Lease logic in isolation (fakeredis): SET NX PX, compare-and-set renew and release."""

from __future__ import annotations

import fakeredis
import pytest

from workers.engine import lease as lease_mod


@pytest.fixture()
def leases():
    return lease_mod.LeaseStore(fakeredis.FakeRedis(), namespace="ns", ttl_ms=1000)


def test_one_owner_at_a_time(leases):
    first = leases.acquire(7, owner="a")
    assert first is not None and first.key == "ns:lease:7" and first.value.startswith("a:")
    assert leases.acquire(7, owner="b") is None
    assert leases.holder(7) == first.value
    assert leases.acquire(8, owner="b") is not None  # other instances are independent


def test_renew_extends_only_the_own_lease(leases):
    mine = leases.acquire(1, owner="a")
    assert leases.renew(mine)
    assert 0 < leases.client.pttl(mine.key) <= 1000
    leases.client.set(mine.key, "someone-else", px=1000)  # taken over after an expiry
    assert not leases.renew(mine)
    assert leases.holder(1) == "someone-else"


def test_a_vanished_lease_is_taken_again_by_its_owner(leases):
    mine = leases.acquire(1, owner="a")
    leases.client.flushall()  # Redis lost its keys
    assert leases.renew(mine)
    assert leases.holder(1) == mine.value


def test_release_deletes_only_the_own_lease(leases):
    mine = leases.acquire(1, owner="a")
    leases.client.set(mine.key, "other", px=1000)
    assert not leases.release(mine)
    assert leases.holder(1) == "other"
    leases.client.set(mine.key, mine.value, px=1000)
    assert leases.release(mine)
    assert leases.holder(1) is None
    assert leases.acquire(1, owner="b") is not None
