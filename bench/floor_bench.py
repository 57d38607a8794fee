"""The floor of a context's sandbox cost: what the kernel charges for the isolation primitives
alone, with none of takohost's Python work in the child (docs/spec/host-features.md#hf-performance: "where a target is
missed, report the measured breakdown").

    python -m bench.floor_bench                  # 3 alternating rounds of 300 iterations each
    python -m bench.floor_bench --iterations 1000 --rounds 5

Each variant runs in a fresh process, either a bare interpreter (``bare``) or one that has
loaded what the zygote loads before it forks (``zygote``: ``takohost.runtime.zygote._preload``,
the same modules, warm-up and ``gc.freeze``), and repeats one iteration:

- ``fork``: ``os.fork()``, the child ``os._exit(0)``, the parent waits for it;
- ``pid_namespace``: the same, the child PID 1 of a new PID namespace (``unshare(CLONE_NEWPID)``
  before the fork, the parent's namespace for its next child restored after it, as
  ``isolation.forking.Forker.fork`` does);
- ``namespaces``: the same, and the child takes the other namespaces a context takes (mount,
  network, IPC, UTS, cgroup; ``isolation.forking.Forker.enter``) before it exits;
- ``enter``: a real ``isolation.forking.Forker`` of the default policy (the one ``takohost worker``
  runs) forks the child and the child runs ``Forker.enter`` (its memory cgroup, a private copy
  of the template root, the namespaces, ``/proc`` and ``/tmp``, limits, its own uid, no
  capabilities, the system-call filter) before it exits; the parent removes its cgroup after;
- ``cow_1000``: ``fork``, and the child writes one byte to each of 1,000 pages it shares with
  its parent (1,000 copy-on-write faults; a real context takes about 1,030 faults in all).

CPU per iteration is the forking process's own and its waited children's (``os.times()``:
user + system + children's user + system), never whole-machine CPU; wall per iteration is the
fork to the reaped exit. Kernel worker threads are counted beside it (docs/spec/host-features.md: the
kernel tears a network namespace and a memory cgroup down in its workqueue threads, after the
exit, charged to no process of ours): ``kworker_ms`` is the scheduler runtime of the machine's
``kworker`` threads (``bench.proc_cpu.kernel_threads``, ``/proc/<pid>/schedstat``) from
the start of the timed loop to 0.3 s after its end, per iteration; ``kworker_idle_ms`` the same
over an equally long span right after, when nothing of ours runs (the machine's other work);
``kworker_net_ms`` their difference, and ``cpu_with_kworker_ms`` the CPU plus it
(``kernel_threads_*``: the same over every kernel thread, softirq and RCU threads included; work
done in softirq context on our own CPU time is already in ``cpu_ms``; ``cpu_with_kernel_threads_ms``
the CPU plus ``kernel_threads_net_ms``, the wider count). On a busy machine the
idle span's figure varies: compare medians of rounds. Prints one JSON object: per interpreter
and variant, the median over rounds of each figure, and each round's figures. Needs Linux;
namespaces need root or unprivileged user namespaces (a non-root run enters one first, as the
zygote does).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from bench import proc_cpu
from takohost.runtime import isolation

#: Seconds after a run for the kernel's deferred teardown (network namespaces, memory cgroups).
_SETTLE_SECONDS = 0.3
VARIANTS = ("fork", "pid_namespace", "namespaces", "enter", "cow_1000")
INTERPRETERS = ("bare", "zygote")
_PAGE = 4096


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _iteration(
    variant: str, pidns_fd: int, pages: bytearray, forker: isolation.forking.Forker | None
) -> None:
    if forker is not None:
        pid = forker.fork()
        if pid == 0:
            try:
                forker.enter()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        forker.release(pid)  # its memory and freezer cgroups, its uid
        return
    if variant in ("pid_namespace", "namespaces"):
        isolation.syscalls.unshare(isolation.syscalls.CLONE_NEWPID)
    pid = os.fork()
    if pid == 0:
        try:
            if variant == "namespaces":
                isolation.syscalls.unshare(
                    isolation.syscalls.CLONE_NEWNS
                    | isolation.syscalls.CLONE_NEWNET
                    | isolation.syscalls.CLONE_NEWIPC
                    | isolation.syscalls.CLONE_NEWUTS
                    | isolation.syscalls.CLONE_NEWCGROUP
                )
            elif variant == "cow_1000":
                for offset in range(0, len(pages), _PAGE):
                    pages[offset] = 1
        finally:
            os._exit(0)
    if variant in ("pid_namespace", "namespaces"):
        isolation.syscalls.setns(pidns_fd, isolation.syscalls.CLONE_NEWPID)
    os.waitpid(pid, 0)


def inner(interpreter: str, variant: str, iterations: int) -> dict:
    """In this process: load ``interpreter``'s state, then time ``iterations`` of ``variant``.
    Returns ``{"cpu_ms": …, "wall_ms": …}`` per iteration (milliseconds)."""
    from takohost.runtime import zygote

    forker, children_dir = None, None
    if variant == "enter":  # as the zygote does: the Forker first, then the preload
        policy = isolation.policy.Policy.from_environ()
        layout = isolation.mounts.Layout.compute(policy)
        children_dir = zygote._make_children_dir()
        forker = isolation.forking.Forker(layout, root=children_dir)
    if interpreter == "zygote":
        zygote._preload()
    if not isolation.identity.host_is_root() and variant in ("pid_namespace", "namespaces"):
        isolation.syscalls.unshare(isolation.syscalls.CLONE_NEWUSER)
    pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    pages = bytearray(b"\0" * (_PAGE * 1000))
    try:
        for _ in range(20):  # warm-up
            _iteration(variant, pidns_fd, pages, forker)
        time.sleep(_SETTLE_SECONDS)  # the warm-up's deferred kernel work
        cpu_start, wall_start = _cpu_seconds(), time.perf_counter()
        kernel_start = proc_cpu.kernel_threads()
        for _ in range(iterations):
            _iteration(variant, pidns_fd, pages, forker)
        cpu, wall = _cpu_seconds() - cpu_start, time.perf_counter() - wall_start
        time.sleep(_SETTLE_SECONDS)  # namespaces and cgroups are torn down by workers, later
        kernel = _delta(kernel_start, proc_cpu.kernel_threads())
        # The same span with nothing of ours running: the machine's other kernel work.
        idle_start = proc_cpu.kernel_threads()
        time.sleep(wall + _SETTLE_SECONDS)
        idle = _delta(idle_start, proc_cpu.kernel_threads())
    finally:
        if forker is not None:
            forker.close()
        if children_dir is not None:
            shutil.rmtree(children_dir, ignore_errors=True)
    per = 1000 / iterations
    result = {"cpu_ms": round(cpu * per, 3), "wall_ms": round(wall * per, 3)}
    for key in ("kworker", "all"):
        name = "kernel_threads" if key == "all" else key
        result[f"{name}_ms"] = round(kernel[key] * per, 3)
        result[f"{name}_idle_ms"] = round(idle[key] * per, 3)
        result[f"{name}_net_ms"] = round((kernel[key] - idle[key]) * per, 3)
    result["cpu_with_kworker_ms"] = round(result["cpu_ms"] + result["kworker_net_ms"], 3)
    result["cpu_with_kernel_threads_ms"] = round(result["cpu_ms"] + result["kernel_threads_net_ms"], 3)
    return result


def _delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    return proc_cpu.kernel_thread_delta(before, after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", nargs=2, metavar=("INTERPRETER", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        print(json.dumps(inner(args.inner[0], args.inner[1], args.iterations)))
        return 0
    rounds: dict[str, list[dict]] = {f"{i}.{v}": [] for i in INTERPRETERS for v in VARIANTS}
    for _ in range(args.rounds):
        for key in rounds:  # alternating: every variant once per round
            interpreter, variant = key.split(".")
            out = subprocess.run(
                [sys.executable, "-m", "bench.floor_bench", "--iterations", str(args.iterations),
                 "--inner", interpreter, variant],
                check=True, capture_output=True, text=True,
            ).stdout
            rounds[key].append(json.loads(out))
    result = {
        "iterations": args.iterations,
        "rounds": args.rounds,
        "median": {
            key: {figure: statistics.median(r[figure] for r in runs) for figure in runs[0]}
            for key, runs in rounds.items()
        },
        "runs": rounds,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
