"""The sandbox session (``workers.sandbox.session``): a real child process behind a real
``ChildHandle`` (a socketpair and its pidfd), the lease in fakeredis, the process's heartbeat
driven by hand."""

from __future__ import annotations

import fakeredis
import pytest

from tests.support.child_channel import child_channel
from workers import sandbox
from workers.sandbox import heartbeat
from workers.sandbox import lease as lease_mod
from workers.sandbox.session import Session


@pytest.fixture()
def leases():
    return lease_mod.LeaseStore(fakeredis.FakeRedis(), namespace="ns", ttl_ms=60_000)


@pytest.fixture()
def child():
    """``(handle, process)``: a handle whose child is a real process (a group of its own)."""
    with child_channel() as (handle, _, process):
        yield handle, process


def _session(leases, *, delivery: bool = True) -> Session:
    beat = heartbeat.Heartbeat(leases=leases, read_epochs=lambda pks: {}, ttl_s=60.0)
    held = leases.admit_delivery(7, space=None, cap=0) if delivery else leases.acquire(7, owner="w")
    assert isinstance(held, lease_mod.DeliveryLease | lease_mod.Lease)
    session = Session(leases=leases, beat=beat, lease=held)
    if isinstance(held, lease_mod.DeliveryLease):
        session.watch(heartbeat.Watched.delivery(held))
    else:
        session.watch(heartbeat.Watched(instance_pk=7, epoch=1, lease=held))
    return session


def test_a_stop_kills_the_child_proves_it_and_then_the_lease_is_released(leases, child):
    handle, process = child
    session = _session(leases)
    session.attach(handle)
    assert session.watched is not None and session.watched.child is handle  # pinged from now on
    assert session.stop_child() is True
    assert process.wait(timeout=5) == -9  # SIGKILLed, and proven before stop_child returned
    assert session.child is None and session.watched.child is None and handle.pidfd == -1
    assert session.lease is not None and not session.watched.active  # no more renewals
    key = session.lease.key
    session.release()
    assert leases.client.get(key) is None and session.lease is None


def test_keep_alive_stops_the_child_but_keeps_renewing_the_lease(leases, child):
    handle, _ = child
    session = _session(leases)
    session.attach(handle)
    assert session.stop_child(keep_alive=True)
    watched = session.watched
    assert watched is not None and watched.active and watched.child is None
    leases.client.pexpire(watched.lease.key, 100)
    session.beat.beat([watched])
    assert leases.client.pttl(watched.lease.key) > 1000  # the beat still renews it
    session.release()
    assert not watched.active and leases.client.get(watched.lease.key) is None


def test_an_unproven_stop_leaves_the_lease_to_expire(leases, child, monkeypatch):
    """Not proven dead: the lease is never released (its expiry, after the child's watchdog,
    proves the stop), for a context's lease and a delivery's alike."""
    handle, _ = child
    monkeypatch.setattr(sandbox.ChildHandle, "kill_and_wait", lambda self, timeout=5.0: False)
    for delivery in (True, False):
        session = _session(leases, delivery=delivery)
        session.attach(handle)
        assert session.lease is not None
        key = session.lease.key
        assert session.stop_child() is False
        assert session.lease is None
        session.release()
        assert leases.client.get(key) is not None
        leases.client.delete(key)
        monkeypatch.setattr(sandbox.ChildHandle, "close", lambda self: None)  # the handle is reused


def test_a_session_without_a_child_stops_at_once_and_releases(leases):
    session = _session(leases)
    assert session.stop_child() is True
    assert session.lease is not None
    key = session.lease.key
    session.release()
    session.release()  # twice is harmless
    assert leases.client.get(key) is None
