"""CPU counted per process from ``/proc`` (docs/spec/host-features.md#hf-performance: never whole-machine CPU, which the other jobs
of a shared machine inflate).

A process tree's CPU is the sum, over its live processes, of ``utime + stime + cutime + cstime``:
a descendant that has exited and been reaped is in its reaper's ``cutime``/``cstime`` (a sandbox
child in its zygote's, a restarted worker process in its supervisor's), a live one in its own
fields. The difference of two snapshots is what the tree spent in between. Postgres backends are
counted by pid (from ``pg_stat_activity``; a backend that exits between two snapshots is lost,
so use long-lived connections).
"""

from __future__ import annotations

import os
from collections.abc import Callable

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def process_seconds(pid: int, *, children: bool = True) -> float:
    """CPU seconds of ``pid`` (user + system; with ``children``, plus its reaped descendants');
    0 if it is gone."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    end = 15 if children else 13
    return sum(int(value) for value in fields[11:end]) / _TICK


_PF_KTHREAD = 0x00200000


def kernel_threads() -> dict[int, tuple[str, float]]:
    """The machine's kernel threads (``kthreadd`` and its children: the per-process figures never
    include them): pid → ``(name, CPU seconds so far)``, each its scheduler runtime
    (``/proc/<pid>/schedstat``, nanoseconds; its ``stat`` ticks where the kernel has no
    schedstat). Compare two readings with :func:`kernel_thread_delta`."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields is None or not (int(fields[6]) & _PF_KTHREAD):
            continue
        try:
            with open(f"/proc/{name}/schedstat") as f:
                seconds = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            seconds = (int(fields[11]) + int(fields[12])) / _TICK
        try:
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = ""
        out[int(name)] = (comm, seconds)
    return out


def kernel_thread_delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds kernel threads ran between two :func:`kernel_threads` readings, machine-wide:
    ``kworker`` (the workqueue threads, ``kworker/…``: where the kernel tears down a context's
    network namespace and memory cgroup after its exit) and ``all`` (every kernel thread, with
    ``ksoftirqd``, RCU's, ``kswapd``). Only threads in both readings count: one that started or
    exited in between loses its share (workqueue threads are pooled and live long; a thread
    missed by one reading must not count its whole life); work for the machine's other jobs is in
    it (subtract an idle span)."""
    out = {"kworker": 0.0, "all": 0.0}
    for pid, (comm, seconds) in after.items():
        if pid not in before:
            continue
        old_comm, old = before[pid]
        if seconds < old:  # a new thread on a reused pid
            continue
        out["all"] += seconds - old
        if comm.startswith("kworker"):
            out["kworker"] += seconds - old
    return out


def _parents() -> dict[int, int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields is not None and fields[0] != "Z":
                parents[int(name)] = int(fields[1])
    return parents


def tree(root: int) -> list[int]:
    """``root`` and its live descendants (pids), parents before children."""
    by_parent: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        by_parent.setdefault(ppid, []).append(pid)
    order, frontier = [], [root]
    while frontier:
        pid = frontier.pop(0)
        order.append(pid)
        frontier.extend(by_parent.get(pid, []))
    return order


def roles(root: int) -> dict[str, list[int]]:
    """The live processes under ``root`` by role: ``root`` (a supervisor, Celery main or gunicorn
    master), ``sandbox`` (zygotes with their keepers and sandbox children), ``processes`` (the
    others: solo worker processes, prefork pool processes, gunicorn workers)."""
    pids = tree(root)
    sandbox: set[int] = set()
    for pid in pids:
        if pid not in sandbox and _cmdline(pid).startswith("takohost-sandbox"):
            sandbox.update(tree(pid))
    return {
        "root": [root],
        "sandbox": [pid for pid in pids if pid in sandbox],
        "processes": [pid for pid in pids if pid != root and pid not in sandbox],
    }


def snapshot(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far per ``{name}.{role}`` of each named root (see :func:`roles`)."""
    out: dict[str, float] = {}
    for name, root in roots.items():
        for role, pids in roles(root).items():
            out[f"{name}.{role}"] = sum(process_seconds(pid) for pid in pids)
    return out


class Backends:
    """CPU of a set of Postgres backends since this object was made. ``list_pids`` lists the
    backends now (it is asked again at each :meth:`seconds`): one that appeared since counts
    from zero (a connection pool grows under load); one that exited is lost (its CPU went to the
    postmaster's reaping, which serves every database) — prefer long-lived connections."""

    def __init__(self, list_pids: Callable[[], list[int]]) -> None:
        self.list_pids = list_pids
        self.start = {pid: process_seconds(pid, children=False) for pid in list_pids()}

    def seconds(self) -> float:
        """CPU seconds the backends spent since construction."""
        total = 0.0
        for pid in set(self.list_pids()) | set(self.start):
            if _stat(pid) is None:
                continue
            total += process_seconds(pid, children=False) - self.start.get(pid, 0.0)
        return total


def self_seconds() -> float:
    """CPU seconds of this process (all threads, with reaped children)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def difference_ms_per(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """``after - before`` per key, in milliseconds per one of ``count`` units, plus ``total``."""
    keys = sorted(set(before) | set(after))
    out = {key: round((after.get(key, 0.0) - before.get(key, 0.0)) * 1000 / count, 2) for key in keys}
    out["total"] = round(sum(out.values()), 2)
    return out
