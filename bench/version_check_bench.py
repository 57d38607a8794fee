"""The cost of checking a candidate Version against one recorded history in the sandbox (docs/spec/host-features.md#hf-testing
item 5): ``workers.version_check.check_spec`` on a history of ``--steps`` completed ``do`` steps
and a pending wait, recorded in process by ``takohost.testing``.

    python -m bench.version_check_bench [--steps 20] [--checks 100]

Per check, medians over ``--rounds`` rounds of ``--checks`` checks one after another: wall time
(ms), this process's CPU (``/proc/self/stat``: the parent's side, answering the child from the
history) and the zygote's tree CPU (its reaped children: fork, import, replay in the sandbox).
No database: the Version's spec is built here. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench import proc_cpu


def _source(steps: int) -> str:
    lines = [
        "from takohost import WaitTimeout",
        "class Long:",
        "    def __init__(self, env): self.env = env",
        "    def run(self, event, step):",
    ]
    lines += [f"        step.do('s{i}', lambda: {{'i': {i}}})" for i in range(steps)]
    lines += ["        return step.wait_for_event('end', {'type': 'end', 'timeoutSeconds': 3600})"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict:
    from takohost import testing
    from workers import sandbox, version_check

    source = _source(args.steps)
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "main.py"), "w") as f:
            f.write(source)
        with open(os.path.join(directory, "takohost.toml"), "w") as f:
            f.write('[worker]\nname = "long"\n[[workflows]]\nname = "long-flow"\nclass = "Long"\n')
        inst = testing.start(directory, auto=False, id="bench-1")
    assert inst.status == "waiting" and len(inst.steps) == args.steps + 1
    events = inst.history
    spec = {"mainModule": "main.py", "modules": {"main.py": source}, "vars": {}, "workflowBindings": []}
    zygote = sandbox.Zygote()
    zygote.start()
    rounds = []
    try:
        for _ in range(args.rounds):
            mine, tree, wall = proc_cpu.process_seconds(os.getpid()), proc_cpu.process_seconds(zygote.pid), time.perf_counter()
            for _ in range(args.checks):
                outcome = version_check.check_spec(
                    version_uid="bench", spec=spec, class_name="Long", instance_id="bench-1",
                    events=events, status={"status": "waiting"}, zygote=zygote,
                )
                assert outcome.result == "compatible" and outcome.replay.replayed == args.steps, outcome.message
            wall = time.perf_counter() - wall
            time.sleep(0.2)  # the last child is reaped into the zygote's counters
            rounds.append(
                {
                    "wall_ms": wall / args.checks * 1000,
                    "parent_cpu_ms": (proc_cpu.process_seconds(os.getpid()) - mine) / args.checks * 1000,
                    "sandbox_cpu_ms": (proc_cpu.process_seconds(zygote.pid) - tree) / args.checks * 1000,
                }
            )
    finally:
        zygote.stop()
    return {
        "steps": args.steps,
        "checks_per_round": args.checks,
        "rounds": args.rounds,
        **{key: round(statistics.median(r[key] for r in rounds), 2) for key in rounds[0]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checks", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
