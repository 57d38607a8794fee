"""Warm sandbox children (workers/sandbox/children.py) with a fake zygote: no processes."""

from __future__ import annotations

import pytest

from workers import sandbox
from workers.sandbox import children


class FakeChild:
    def __init__(self, n):
        self.n, self.jobs, self.killed, self.exited = n, [], False, False

    def send(self, message):
        if self.exited:
            raise sandbox.ChildGone("gone")
        self.jobs.append(message)

    def send_job(self, job, *, space=None):
        self.send({**job, "op": "job"})
        self.space = space

    def kill_and_wait(self):
        self.killed = True
        return True

    def close(self):
        pass


class FakeZygote:
    def __init__(self):
        self.spawned = []

    def spawn(self, job, *, space=None):
        child = FakeChild(len(self.spawned))
        child.space = space
        if job is not None:
            child.jobs.append({**job, "op": "job"})
        self.spawned.append(child)
        return child


@pytest.fixture()
def zygote(monkeypatch):
    monkeypatch.setattr(children, "_warm", {})
    return FakeZygote()


def _settle(zygote, count):
    import time

    deadline = time.monotonic() + 5
    while len(zygote.spawned) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_warm_child_gets_the_next_job(zygote):
    children.prespawn(zygote)
    _settle(zygote, 1)
    child = children.take_child(zygote, {"kind": "workflow"})
    assert child is zygote.spawned[0] and child.jobs == [{"kind": "workflow", "op": "job"}]
    assert len(zygote.spawned) == 1  # no second fork


def test_without_a_warm_child_one_is_spawned_with_the_job(zygote):
    child = children.take_child(zygote, {"kind": "workflow"})
    assert child.jobs == [{"kind": "workflow", "op": "job"}]


def test_a_dead_or_stale_warm_child_is_replaced(zygote, monkeypatch):
    children.prespawn(zygote)
    _settle(zygote, 1)
    zygote.spawned[0].exited = True
    child = children.take_child(zygote, {"kind": "x"})
    assert child is zygote.spawned[1] and zygote.spawned[0].killed
    monkeypatch.setattr(children, "WARM_MAX_AGE_SECONDS", 0.0)
    children.prespawn(zygote)
    _settle(zygote, 3)
    child = children.take_child(zygote, {"kind": "y"})
    assert child is zygote.spawned[3] and zygote.spawned[2].killed and zygote.spawned[2].jobs == []
