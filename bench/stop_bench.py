"""How long the stop proof holds up a status (docs/spec/host-features.md): a frozen cgroup against
kill-and-wait for the exit.

    python -m bench.stop_bench                      # 3 rounds of 30 alternating pairs, 40 MiB
    python -m bench.stop_bench --rounds 5 --pairs 50 --mib 0

Each context is a real sandbox child of one zygote (the default policy) whose workflow touches
``--mib`` MiB of its own memory and then either returns (``final``: the child exits by itself
after its final message, as after a 1-step instance) or suspends (``suspended``: ``step.sleep``,
the child waits to be killed). Then the stop is proven, alternately by
``ChildHandle.kill_and_wait`` (``frozen``: the freezer cgroup confirmed ``FROZEN``, the kill
follows off the path) and by ``ChildHandle._kill_and_wait_exit`` (``exited``: SIGKILL, then the
pidfd reports the exit of the context's PID 1, after the kernel tore down its processes and
memory). The figure is the wall time of that call, from the moment the context's message is in to
the proof, in milliseconds. Prints one JSON object: per scenario and method the median over
rounds of each round's p50 and p90, how often each proof held (``kill_and_wait`` falls back to
the exit when the context had already gone: its cgroup is removed once the zygote reaps it),
every round's figures, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from workers import sandbox

JOB = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        held = bytearray(event["params"]["bytes"])
        for offset in range(0, len(held), 4096):
            held[offset] = 1
        if event["params"]["suspend"]:
            step.sleep("nap", 3600)
        return {"held": len(held)}
"""
SCENARIOS = ("final", "suspended")


def _one(zygote: sandbox.Zygote, method: str, size: int, scenario: str) -> tuple[float, str]:
    job = {
        "kind": "workflow",
        "mainModule": "main.py",
        "modules": {"main.py": JOB},
        "className": "W",
        "event": {"instanceId": "i", "params": {"bytes": size, "suspend": scenario == "suspended"}},
        "vars": {},
        "bindings": [],
    }
    handle = zygote.spawn(job)
    try:
        answer = handle.recv(timeout=10)
        assert answer["op"] == ("sleep" if scenario == "suspended" else "run_returned"), answer
        started = time.perf_counter()
        proven = handle.kill_and_wait() if method == "frozen" else handle._kill_and_wait_exit(5.0)
        elapsed = time.perf_counter() - started
        assert proven
        return elapsed * 1000, handle.stop_proof
    finally:
        handle.close()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--mib", type=int, default=40)
    args = parser.parse_args(argv)
    zygote = sandbox.Zygote()
    zygote.start()
    methods = ("frozen", "exited")
    keys = [f"{scenario}.{method}" for scenario in SCENARIOS for method in methods]
    rounds: dict[str, list[dict]] = {key: [] for key in keys}
    proofs: dict[str, dict[str, int]] = {key: {} for key in keys}
    try:
        for key in keys:  # warm-up
            _one(zygote, key.split(".")[1], args.mib << 20, key.split(".")[0])
        for round_index in range(args.rounds):
            samples: dict[str, list[float]] = {key: [] for key in keys}
            for pair in range(args.pairs):
                for scenario in SCENARIOS:
                    order = methods if (pair + round_index) % 2 == 0 else methods[::-1]
                    for method in order:  # alternating, and which goes first alternates too
                        key = f"{scenario}.{method}"
                        elapsed, proof = _one(zygote, method, args.mib << 20, scenario)
                        samples[key].append(elapsed)
                        proofs[key][proof] = proofs[key].get(proof, 0) + 1
            for key in keys:
                rounds[key].append({"p50_ms": _quantile(samples[key], 0.5), "p90_ms": _quantile(samples[key], 0.9)})
    finally:
        zygote.stop()
    result = {
        "mib": args.mib,
        "pairs": args.pairs,
        "rounds": args.rounds,
        "median": {
            key: {stat: statistics.median(r[stat] for r in rounds[key]) for stat in ("p50_ms", "p90_ms")}
            for key in keys
        },
        "proofs": proofs,
        "runs": rounds,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
