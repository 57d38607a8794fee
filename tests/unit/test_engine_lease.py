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


class _Child:
    def __init__(self) -> None:
        self.pings = 0

    def ping(self) -> None:
        self.pings += 1


def test_the_stop_proof_timing_kills_the_child_before_the_lease_can_expire():
    from workers.engine import heartbeat

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

    from workers.engine import heartbeat

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
    from workers.engine import heartbeat

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

    from workers.engine import heartbeat

    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {}, ttl_s=1.0)
    now = time.monotonic()
    watched = heartbeat.Watched(
        instance_pk=1, epoch=1, lease=leases.acquire(1, owner="a"), child=_Child(), renewed_at=now,
        last_ping=now - 0.7,
    )  # fmt: skip
    beat.ping([watched])
    assert watched.child.pings == 1
    assert watched.ping_gap() >= 0.7 > time.monotonic() - watched.last_ping
