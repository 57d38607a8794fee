"""The order the suite's test files run in, across pytest-xdist processes (``--dist loadfile``).

The suite's wall time is set by a few long files (a cron timeline of about eight real minutes,
the newcomer's fresh checkout, the chaos test), not by the sum of the rest. xdist's ``loadfile``
sends files in order of test count (most first), so a one-test file of eight minutes started
late and the run lasted its length plus most of everything else. And an xdist process runs a
test only once it holds the next one too, so whatever file it is sent while busy waits behind
the current one — behind the eight minutes, if that is what it runs.

So (LPT, longest first):

* Each test's cost is its setup + call + teardown seconds of the last run that ran it (kept in
  the pytest cache under ``takohost/test-seconds``, written by the controller at the end of a
  run); a test not measured yet is estimated from its tier and ``slow`` marker (:func:`estimate`).
* Files leave the queue most expensive first, to the process that asks; except that a process
  whose pending tests still cost more than :data:`LOOKAHEAD_SECONDS` gets the cheapest file as
  its look-ahead (it will not start it before then anyway).
* Collection puts ``slow`` files first and cheap tiers last (:func:`order_items`), keeping each
  file's own order; it is what ``-n 0`` runs in, and the tie-break of the queue.

Nothing here changes what a test does or whether it runs; only when, and in which process.
"""

from __future__ import annotations

import collections
import json
import os

import pytest
from xdist.scheduler import LoadFileScheduling

CACHE_KEY = "takohost/test-seconds"
#: nodeids of ``slow``-marked tests, written by the xdist processes as they collect.
SLOW_KEY = "takohost/slow-tests"
#: A process busy for longer than this gets the cheapest waiting file as its look-ahead.
LOOKAHEAD_SECONDS = 20.0
#: Seconds a not-yet-measured test is assumed to take, by tier (first path part under tests/).
TIER_SECONDS = {
    "chaos": 60.0, "e2e": 8.0, "security": 5.0, "browser": 5.0,
    "integration": 0.5, "migrations": 1.0, "unit": 0.05,
}
SLOW_SECONDS = 120.0
#: Collection order of files by tier (most expensive first); ``slow`` files come before all.
TIER_RANK = ("chaos", "security", "e2e", "browser", "integration", "migrations", "unit")


def _tier(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def estimate(nodeid: str, *, slow: bool) -> float:
    """The assumed seconds of a test that has no measurement yet."""
    return SLOW_SECONDS if slow else TIER_SECONDS.get(_tier(nodeid), 1.0)


def order_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files with a ``slow`` test first, then by tier rank, each
    file's tests in their own order; record the slow nodeids for the controller's scheduler."""
    slow_files = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    position = {}
    for index, item in enumerate(items):
        position.setdefault(item.nodeid.split("::", 1)[0], index)

    def key(pair: tuple[int, pytest.Item]) -> tuple:
        index, item = pair
        path = item.nodeid.split("::", 1)[0]
        tier = _tier(item.nodeid)
        rank = TIER_RANK.index(tier) if tier in TIER_RANK else len(TIER_RANK)
        return (path not in slow_files, rank, position[path], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
    cache = getattr(config, "cache", None)
    if cache is not None and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        slow = {item.nodeid for item in items if item.get_closest_marker("slow")}
        cache.set(SLOW_KEY, sorted(slow | set(cache.get(SLOW_KEY, []))))  # a union: runs of parts


class Durations:
    """Controller side: sums each test's phase durations and merges them into the cache."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def save(self, config: pytest.Config) -> None:
        cache = getattr(config, "cache", None)
        if cache is None or not self.seconds:
            return
        known = cache.get(CACHE_KEY, {})
        known.update({nodeid: round(s, 3) for nodeid, s in self.seconds.items()})
        cache.set(CACHE_KEY, known)


class LongestFirstScheduling(LoadFileScheduling):
    """``loadfile`` with the queue ordered by cost (see the module docstring)."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        cache = getattr(config, "cache", None)
        self._measured: dict[str, float] = cache.get(CACHE_KEY, {}) if cache is not None else {}
        self._slow: set[str] | None = None
        self._cost: dict[str, float] = {}
        self._ordered = False

    def _test_cost(self, nodeid: str) -> float:
        if nodeid not in self._cost:
            if self._slow is None:
                cache = getattr(self.config, "cache", None)
                self._slow = set(cache.get(SLOW_KEY, [])) if cache is not None else set()
            measured = self._measured.get(nodeid)
            self._cost[nodeid] = measured if measured is not None else estimate(
                nodeid, slow=nodeid in self._slow)
        return self._cost[nodeid]

    def _unit_cost(self, unit: dict[str, bool]) -> float:
        return sum(self._test_cost(nodeid) for nodeid, done in unit.items() if not done)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the queue exists now (schedule() built it in collection order)
            ranked = sorted(self.workqueue.items(), key=lambda kv: -self._unit_cost(kv[1]))
            self.workqueue.clear()
            self.workqueue.update(ranked)
            self._ordered = True
            self.log("longest-first order:", json.dumps([scope for scope, _ in ranked][:8]))
        busy = sum(self._unit_cost(unit) for unit in self.assigned_work.get(node, {}).values())
        if busy > LOOKAHEAD_SECONDS and len(self.workqueue) > 1:
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        super()._assign_work_unit(node)
