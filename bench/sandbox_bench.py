"""Sandbox spawn cost: request → ``hello`` latency and CPU per context, counted per process.

    python -m bench.sandbox_bench                       # this checkout
    python -m bench.sandbox_bench --against ../other    # alternate runs with another checkout
                                                        # (its own .venv), medians side by side

One zygote (default pool of 2 children forked ahead of demand); ``--spawns`` contexts one after
another, each a real job with one step round trip (``do`` → ``run_effect`` → ``effect_result`` →
``resolve`` → ``run_returned``), killed and proven dead. Latencies: spawn (request → hello) and
whole context (request → proven dead). CPU: the zygote's own and its reaped children's
(``utime + stime + cutime + cstime`` of ``/proc/<zygote>/stat``: keepers and sandbox children
are its children) plus this process's, per context, together (``cpu_ms_per_context``) and apart
(``sandbox_cpu_ms_per_context``: the zygote and its children; ``host_cpu_ms_per_context``: this
process, the host's side); never whole-machine CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SOURCE = """
class W:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        return step.do("one", lambda: {"n": 1})
"""


def _proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _self_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def run(spawns: int) -> dict:
    """Measure ``spawns`` contexts on a fresh zygote; returns the JSON summary (milliseconds)."""
    from workers import sandbox

    zygote = sandbox.Zygote()
    zygote.start()
    job = {
        "kind": "workflow",
        "mainModule": "main.py",
        "modules": {"main.py": SOURCE},
        "className": "W",
        "event": {"instanceId": "bench"},
        "vars": {},
        "bindings": [],
    }
    try:
        for _ in range(20):  # warm-up
            with zygote.spawn(job) as handle:
                _drive(handle)
        time.sleep(0.2)
        spawn, whole = [], []
        zygote_start, host_start = _proc_cpu_seconds(zygote.pid), _self_cpu_seconds()
        for _ in range(spawns):
            started = time.perf_counter()
            handle = zygote.spawn(job)
            spawn.append(handle.spawn_seconds)
            with handle:
                _drive(handle)
            whole.append(time.perf_counter() - started)
        time.sleep(0.3)  # let the zygote reap the last keepers (their CPU lands in cutime)
        sandbox_cpu = _proc_cpu_seconds(zygote.pid) - zygote_start
        host_cpu = _self_cpu_seconds() - host_start
    finally:
        zygote.stop()
    return {
        "spawns": spawns,
        "spawn_p50_ms": round(statistics.median(spawn) * 1000, 3),
        "context_p50_ms": round(statistics.median(whole) * 1000, 3),
        "cpu_ms_per_context": round((sandbox_cpu + host_cpu) * 1000 / spawns, 3),
        "sandbox_cpu_ms_per_context": round(sandbox_cpu * 1000 / spawns, 3),
        "host_cpu_ms_per_context": round(host_cpu * 1000 / spawns, 3),
    }


def _drive(handle) -> None:
    request = handle.recv(timeout=10)
    assert request["op"] == "do", request
    handle.send({"op": "run_effect", "attempt": 1})
    result = handle.recv(timeout=10)
    assert result["op"] == "effect_result", result
    handle.send({"op": "resolve", "result": result["result"]})
    final = handle.recv(timeout=10)
    assert final["op"] == "run_returned", final
    assert handle.kill_and_wait()


def compare(against: str, *, spawns: int, rounds: int) -> dict:
    """Alternate ``rounds`` runs of this checkout and of ``against`` (each with its own
    ``.venv``); medians of each figure side by side, and new/old ratios."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here, "against": os.path.abspath(against)}
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            done = subprocess.run(
                [os.path.join(tree, ".venv", "bin", "python"), os.path.abspath(__file__), "--spawns", str(spawns)],
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            )
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    keys = ("spawn_p50_ms", "context_p50_ms", "cpu_ms_per_context")
    medians = {name: {k: statistics.median(r[k] for r in runs) for k in keys} for name, runs in results.items()}
    return {
        "rounds": rounds,
        "spawns_per_run": spawns,
        "this": medians["this"],
        "against": medians["against"],
        "ratio_this_over_against": {k: round(medians["this"][k] / medians["against"][k], 3) for k in keys},
    }


def main() -> None:
    """Command-line entry: print one JSON object."""
    parser = argparse.ArgumentParser(prog="bench.sandbox_bench")
    parser.add_argument("--spawns", type=int, default=300)
    parser.add_argument("--against", help="another checkout (with its own .venv) to alternate with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.against:
        print(json.dumps(compare(args.against, spawns=args.spawns, rounds=args.rounds)))
    else:
        print(json.dumps(run(args.spawns)))


if __name__ == "__main__":
    sys.exit(main())
