"""The per-Space cap's rule (``services.fleet.space_cap``) and its Lua twin in the admission script
agree (fakeredis), for any fleet (docs/spec/host-features.md#hf-neighbours)."""

from __future__ import annotations

import time

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services import fleet, redis_keys
from workers.sandbox import lease as lease_mod


@pytest.mark.parametrize(
    ("fixed", "slots", "reserved", "cap"),
    [
        (8, 2, 1, 1),  # takohost dev: one of two slots
        (8, 4, 1, 3),  # 2 workers x 2 slots
        (8, 100, 1, 8),  # a large fleet: the fixed cap
        (8, 1, 1, 1),  # one slot: nothing to keep free without preemption
        (8, 0, 1, 8),  # nothing registered (contexts run in a test process): the fixed cap
        (8, 2, 0, 8),  # reserved 0: the fixed cap alone
        (0, 2, 1, 0),  # no cap at all
        (1, 10, 1, 1),
    ],
)
def test_the_cap_keeps_a_slot_of_the_live_fleet_for_other_spaces(fixed, slots, reserved, cap):
    assert fleet.space_cap(fixed=fixed, live_slots=slots, reserved=reserved) == cap


def _register(client, namespace: str, slots: list[int], *, lapsed: list[int] = ()) -> None:
    now = int(time.time() * 1000)
    key = redis_keys.fleet_slots_key(namespace)
    for i, n in enumerate(slots):
        client.zadd(key, {f"host:{i}:x|{n}": now + 60_000})
    for i, n in enumerate(lapsed):
        client.zadd(key, {f"gone:{i}:x|{n}": now - 1})


def _admitted(store: lease_mod.LeaseStore, *, fixed: int, reserved: int, tries: int) -> int:
    """How many of ``tries`` contexts of one Space the admission script lets run at once."""
    taken = [store.admit(pk, space="a", cap=fixed, reserved=reserved) for pk in range(1, tries + 1)]
    return sum(isinstance(t, lease_mod.Lease) for t in taken)


@settings(max_examples=60, deadline=None)
@given(
    fixed=st.integers(1, 10),
    reserved=st.integers(0, 3),
    slots=st.lists(st.integers(1, 4), max_size=5),
    lapsed=st.lists(st.integers(1, 4), max_size=3),
)
def test_the_admission_script_applies_the_same_rule_over_live_entries_only(fixed, reserved, slots, lapsed):
    client = fakeredis.FakeRedis()
    _register(client, "ns", slots, lapsed=lapsed)
    store = lease_mod.LeaseStore(client, namespace="ns", ttl_ms=60_000)
    expected = fleet.space_cap(fixed=fixed, live_slots=sum(slots), reserved=reserved)
    assert _admitted(store, fixed=fixed, reserved=reserved, tries=12) == expected
    assert store.space_cap(fixed, reserved=reserved) == expected
    assert fleet.live_slots(client, namespace="ns") == sum(slots)  # lapsed entries were dropped


def test_the_cap_follows_workers_that_join_and_leave():
    client = fakeredis.FakeRedis()
    store = lease_mod.LeaseStore(client, namespace="ns", ttl_ms=60_000)
    one = fleet.Registration(client, namespace="ns", slots=2, ttl_ms=60_000)
    one._renew()
    assert store.space_cap(8, reserved=1) == 1
    two = fleet.Registration(client, namespace="ns", slots=2, ttl_ms=60_000)
    two._renew()  # a second worker joins
    assert store.space_cap(8, reserved=1) == 3
    assert _admitted(store, fixed=8, reserved=1, tries=5) == 3
    two.stop()  # it stops cleanly: its slots leave at once
    assert store.space_cap(8, reserved=1) == 1
    short = fleet.Registration(client, namespace="ns", slots=2, ttl_ms=50)
    short._renew()
    assert store.space_cap(8, reserved=1) == 3
    time.sleep(0.1)  # killed: not renewed, its entry lapses one TTL later
    assert store.space_cap(8, reserved=1) == 1
