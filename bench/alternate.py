"""Run benchmark variants in alternation and print each run and the medians side by side
(docs/spec/host-features.md#hf-performance: on a shared machine, compare only in alternating runs, with the load next to figures).

    python -m bench.alternate --runs 3 \\
        --variant solo='python -m bench.engine_bench' \\
        --variant prefork='python -m bench.engine_bench --pool prefork'
    python -m bench.alternate --variant base='env PYTHONPATH=/tmp/b:/tmp/base python -m bench.engine_bench' \\
        --variant new='env PYTHONPATH=/tmp/b:/work/main python -m bench.engine_bench'

Each variant is a shell command printing one JSON object (its last ``{…}`` block of stdout).
Prints one JSON object: every run (with ``uptime`` load averages before it) and, per variant, the
median of each numeric leaf (``a.b.c`` keys).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess


def _leaves(value: object, prefix: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{prefix}{key}."))
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {prefix[:-1]: float(value)}
    return {}


def _last_json(text: str) -> dict:
    start = text.rfind("\n{")
    return json.loads(text[start + 1 if start >= 0 else text.index("{"):])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", action="append", required=True, help="NAME=shell command")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    variants = [spec.split("=", 1) for spec in args.variant]
    runs: list[dict] = []
    for index in range(args.runs):
        for name, command in variants:
            load = os.getloadavg()
            done = subprocess.run(command, shell=True, capture_output=True, text=True)
            if done.returncode != 0:
                runs.append({"variant": name, "run": index, "load_before": load, "error": done.stderr[-2000:]})
                continue
            runs.append({"variant": name, "run": index, "load_before": load, "result": _last_json(done.stdout)})
            print(json.dumps(runs[-1]), flush=True)
    medians: dict[str, dict[str, float]] = {}
    for name, _ in variants:
        leaves = [_leaves(run["result"]) for run in runs if run["variant"] == name and "result" in run]
        keys = sorted({key for leaf in leaves for key in leaf})
        medians[name] = {key: round(statistics.median(leaf[key] for leaf in leaves if key in leaf), 2)
                         for key in keys}
    report = {"runs": runs, "medians": medians}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps({"medians": medians}, indent=2))


if __name__ == "__main__":
    main()
