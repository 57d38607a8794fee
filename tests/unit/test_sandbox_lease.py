"""Leases and the heartbeat (workers.sandbox.lease, workers.sandbox.heartbeat) in isolation (fakeredis): SET NX PX, compare-and-set renew and release, the ping window, fair share."""

from __future__ import annotations

import time

import fakeredis
import pytest

from workers.sandbox import lease as lease_mod


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


class _Child:
    def __init__(self) -> None:
        self.pings = 0

    def ping(self) -> None:
        self.pings += 1


def test_the_stop_proof_timing_kills_the_child_before_the_lease_can_expire():
    from workers.sandbox import heartbeat

    ttl = 1.0
    window = ttl * heartbeat.PING_WINDOW_FRACTION
    watchdog = heartbeat.watchdog_seconds(1000)
    # last ping at most ``window`` after the renewal started; the child dies ``watchdog`` later
    assert window + watchdog < ttl
    # and while renewals succeed, pings come several times per watchdog period
    assert ttl * heartbeat.PING_FRACTION * 3 <= watchdog
    assert ttl * heartbeat.RENEW_FRACTION < window


def test_children_are_pinged_only_while_their_lease_was_renewed_recently(leases):
    import time

    from workers.sandbox import heartbeat

    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {}, ttl_s=1.0)
    fresh, stale = _Child(), _Child()
    lease = leases.acquire(1, owner="a")
    now = time.monotonic()
    watched = [
        heartbeat.Watched(instance_pk=1, epoch=1, lease=lease, child=fresh, renewed_at=now),
        heartbeat.Watched(instance_pk=2, epoch=1, lease=lease, child=stale, renewed_at=now - 0.45),
    ]
    beat.ping(watched)
    assert (fresh.pings, stale.pings) == (1, 0)  # no renewal for 0.4 TTL: the watchdog may fire
    beat.beat([watched[1]])  # a successful renewal re-opens the window
    beat.ping(watched)
    assert (fresh.pings, stale.pings) == (2, 1)


def test_a_beat_never_revives_the_lease_of_a_context_that_unregistered(leases):
    """A beat working on a snapshot that still lists a finished context must not take its released
    lease again (``renew`` re-takes a vanished lease): that ghost would keep the instance busy."""
    from workers.sandbox import heartbeat

    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {3: 1}, ttl_s=1.0)
    lease = leases.acquire(3, owner="a")
    watched = heartbeat.Watched(instance_pk=3, epoch=1, lease=lease)
    snapshot = [watched]  # what the beat thread copied before the context finished
    beat.unregister(watched)
    leases.release(lease)
    beat.beat(snapshot)
    assert leases.holder(3) is None


def test_the_longest_ping_gap_is_remembered_after_pings_resume(leases):
    """A child whose pings were late (this process starved) may have been killed by its watchdog
    although pings resumed just before its death was noticed: the gap is kept, not overwritten."""
    import time

    from workers.sandbox import heartbeat

    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {}, ttl_s=1.0)
    now = time.monotonic()
    watched = heartbeat.Watched(
        instance_pk=1, epoch=1, lease=leases.acquire(1, owner="a"), child=_Child(), renewed_at=now,
        last_ping=now - 0.7,
    )  # fmt: skip
    beat.ping([watched])
    assert watched.child.pings == 1
    assert watched.ping_gap() >= 0.7 > time.monotonic() - watched.last_ping


class _Killable(_Child):
    def __init__(self) -> None:
        super().__init__()
        self.killed = 0

    def kill_and_wait(self) -> bool:
        self.killed += 1
        return True


def test_the_heartbeat_keeps_a_cron_delivery_alive_like_a_context(leases):
    """A cron delivery is kept alive by the same heartbeat as the replay contexts: its lease is
    renewed (still counted in its Space), its child pinged while the lease is fresh, and no epoch
    is read for it (it has none: its trigger's DELETE fence is its own loop's)."""
    from workers.sandbox import heartbeat

    read: list[list[int]] = []
    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: read.append(pks) or {}, ttl_s=1.0)
    lease = leases.admit_delivery(70, space=None, cap=0)
    assert isinstance(lease, lease_mod.DeliveryLease)
    watched = heartbeat.Watched.delivery(lease)
    child = _Killable()
    watched.attach(child)
    leases.client.pexpire(lease.key, 100)
    beat.beat([watched])
    assert 100 < leases.client.pttl(lease.key) <= 1000 and not watched.lost
    assert read == []  # deliveries only: no epoch read
    beat.ping([watched])
    assert child.pings == 1
    watched.detach()
    beat.ping([watched])
    assert child.pings == 1  # detached: no more pings (the gap keeps growing for the judgement)
    assert watched.ping_gap() >= 0.0
    beat.unregister(watched)
    assert leases.release(lease)


def test_a_lost_delivery_lease_kills_its_child_and_a_vanished_one_is_never_taken_again(leases):
    from workers.sandbox import heartbeat

    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {}, ttl_s=1.0)
    lease = leases.admit_delivery(71, space=None, cap=0)
    assert isinstance(lease, lease_mod.DeliveryLease)
    watched = heartbeat.Watched.delivery(lease)
    child = _Killable()
    watched.attach(child)
    leases.client.delete(lease.key)  # the sweep may have finished it unknown and sent it again
    beat.beat([watched])
    assert watched.lost and child.killed == 1
    assert leases.client.get(lease.key) is None  # a vanished delivery lease is not taken again


# -- fair share between Spaces (docs/spec/host-features.md#hf-isolation) ---------------------------------------------------


@pytest.fixture()
def capped():
    handed: list[int] = []
    store = lease_mod.LeaseStore(fakeredis.FakeRedis(), namespace="ns", ttl_ms=1000, handoff=handed.append)
    return store, handed


def test_a_space_at_its_cap_defers_without_taking_anything(capped):
    leases, _ = capped
    first = leases.admit(1, space="a", cap=2, owner="w")
    second = leases.admit(2, space="a", cap=2, owner="w")
    assert isinstance(first, lease_mod.Lease) and first.space == "a"
    assert isinstance(second, lease_mod.Lease)
    assert leases.admit(3, space="a", cap=2, owner="w") == lease_mod.DEFERRED
    assert leases.holder(3) is None  # nothing taken: the instance stays queued
    assert leases.client.zrange(leases.waiting_key("a"), 0, -1) == [b"3"]
    assert isinstance(leases.admit(9, space="b", cap=2, owner="w"), lease_mod.Lease)  # other Spaces
    assert leases.admit(1, space="a", cap=2, owner="x") == lease_mod.BUSY  # held: not recorded
    assert leases.client.zrange(leases.waiting_key("a"), 0, -1) == [b"3"]
    assert leases.running(["a", "b", "c"]) == {"a": 2, "b": 1, "c": 0}


def test_releasing_a_space_lease_hands_the_slot_to_the_oldest_waiting(capped):
    leases, handed = capped
    held = leases.admit(1, space="a", cap=1, owner="w")
    assert leases.admit(2, space="a", cap=1, owner="w") == lease_mod.DEFERRED
    assert leases.admit(3, space="a", cap=1, owner="w") == lease_mod.DEFERRED
    assert leases.admit(2, space="a", cap=1, owner="w") == lease_mod.DEFERRED  # keeps its place
    assert leases.release(held)
    assert handed == [2]
    taken = leases.admit(2, space="a", cap=1, owner="w")
    assert isinstance(taken, lease_mod.Lease)
    assert leases.client.zrange(leases.waiting_key("a"), 0, -1) == [b"3"]
    assert leases.release(taken) and handed == [2, 3]
    assert leases.release(leases.admit(3, space="a", cap=1, owner="w"))
    assert handed == [2, 3]  # nobody waits any more


def test_an_expired_lease_frees_its_slot(capped):
    leases, handed = capped
    held = leases.admit(1, space="a", cap=1, owner="w")
    leases.client.delete(held.key)  # the worker was SIGKILLed: its lease expired
    assert isinstance(leases.admit(2, space="a", cap=1, owner="w"), lease_mod.Lease)
    assert leases.client.smembers(leases.contexts_key("a")) == {b"2"}
    assert not leases.release(held) and handed == []  # not ours any more: nothing handed on


def test_renewal_keeps_a_space_lease_counted_after_redis_lost_its_keys(capped):
    leases, _ = capped
    held = leases.admit(1, space="a", cap=1, owner="w")
    leases.client.flushall()
    assert leases.renew(held)
    assert leases.holder(1) == held.value
    assert leases.running(["a"]) == {"a": 1}
    assert leases.admit(2, space="a", cap=1, owner="w") == lease_mod.DEFERRED
    leases.client.set(held.key, "other", px=1000)
    assert not leases.renew(held)


def test_no_space_or_no_cap_is_a_plain_lease(capped):
    leases, _ = capped
    assert isinstance(leases.admit(1, space=None, cap=1), lease_mod.Lease)
    assert leases.admit(1, space=None, cap=1) == lease_mod.BUSY
    for pk in (2, 3):
        lease = leases.admit(pk, space="a", cap=0)
        assert isinstance(lease, lease_mod.Lease) and lease.space is None


def test_a_cron_delivery_takes_a_slot_of_its_space_like_a_context(capped, monkeypatch):
    """A hostile Space's long ``scheduled`` handlers held every worker slot while another Space's
    instance stayed ``queued`` for minutes: deliveries were not counted. Now a delivery's lease
    is a member ``cron:{match_pk}`` of its Space's slots: counted with the contexts, deferred at
    the cap, handed a slot on release (through ``deliver_cron_match``), and it hands its own on."""
    leases, handed = capped
    delivered: list[int] = []
    monkeypatch.setattr(lease_mod.dispatch, "deliver_cron_match", delivered.append)
    context = leases.admit(1, space="a", cap=2, owner="w")
    first = leases.admit_delivery(70, space="a", cap=2)
    try:
        assert isinstance(first, lease_mod.DeliveryLease) and first.key == "ns:cronlease:70"
        assert leases.running(["a"]) == {"a": 2}  # counted, and not dropped as a stale member
        assert leases.admit_delivery(70, space="a", cap=2) == lease_mod.BUSY
        assert leases.admit_delivery(71, space="a", cap=2) == lease_mod.DEFERRED
        assert leases.client.get("ns:cronlease:71") is None  # nothing taken
        time.sleep(0.002)  # a later deferral time (equal scores would order by member)
        assert leases.admit(2, space="a", cap=2, owner="w") == lease_mod.DEFERRED  # contexts wait too
        assert isinstance(leases.admit(9, space="b", cap=2, owner="w"), lease_mod.Lease)  # not B's
        assert leases.client.zrange(leases.waiting_key("a"), 0, -1) == [b"cron:71", b"2"]
        assert leases.renew(first) and leases.running(["a"]) == {"a": 2}
    finally:
        leases.release(first)
    assert delivered == [71] and handed == []  # the oldest waiting is the delivery
    second = leases.admit_delivery(71, space="a", cap=2)
    assert isinstance(second, lease_mod.DeliveryLease)
    leases.release(second)
    assert handed == [2]  # a delivery's release hands the slot to a waiting context
    assert leases.release(context)


def test_an_expired_delivery_lease_frees_its_slot_and_renewal_keeps_it_counted(capped):
    leases, _ = capped
    held = leases.admit_delivery(70, space="a", cap=1)
    try:
        leases.client.delete(leases.contexts_key("a"))  # Redis lost the SET: the renewal adds it again
        assert leases.renew(held) and leases.running(["a"]) == {"a": 1}
        leases.client.delete(held.key)  # the worker was SIGKILLed: its delivery lease expired
        assert leases.running(["a"]) == {"a": 0}
        assert not leases.renew(held)  # a vanished delivery lease is lost, never taken again
        assert isinstance(leases.admit(2, space="a", cap=1, owner="w"), lease_mod.Lease)
    finally:
        leases.release(held)


def test_no_space_or_no_cap_is_a_plain_delivery_lease(capped):
    leases, _ = capped
    for space, cap in ((None, 1), ("a", 0)):
        held = leases.admit_delivery(5, space=space, cap=cap)
        assert isinstance(held, lease_mod.DeliveryLease) and held.space is None
        assert leases.admit_delivery(5, space=space, cap=cap) == lease_mod.BUSY
        assert leases.renew(held) and leases.release(held)
        assert not leases.renew(held)  # gone: lost, never taken again
    assert leases.running(["a"]) == {"a": 0}


def test_note_waiting_records_sweep_orphans_for_hand_off(capped):
    leases, handed = capped
    held = leases.admit(1, space="a", cap=1, owner="w")
    leases.note_waiting({"a": [5, 6], "b": []})
    assert leases.release(held) and handed == [5]


def test_the_sweep_sends_each_space_at_most_its_free_slots():
    from workers.engine import sweep

    orphans = [(1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "b")]
    now, waiting = sweep.admissible(orphans, cap=2, running={"a": 1, "b": 0})
    assert now == [1, 2, 5]
    assert waiting == {"a": [3, 4]}
    assert sweep.admissible(orphans, cap=0, running={}) == ([1, 2, 3, 4, 5], {})
