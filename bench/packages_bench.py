"""What a pinned package costs a context (docs/spec/host-features.md#hf-real-work; docs/packages.md "Cost"): a Version
whose main module imports ``requests`` from its layer against a stdlib-only Version that imports
``json`` and ``urllib.request``, side by side.

    python -m bench.packages_bench                        # requests fetched with pip download
    python -m bench.packages_bench --wheelhouse DIR       # ... or from a directory of wheels

The layer is installed once with the host's installer (``workers.packages``) into a temporary
package directory; one zygote mounts it. Then ``--rounds`` alternating batches of ``--contexts``
contexts per variant, each a real workflow job with one step: spawn request → the step's effect
has run (``effect_result``: the first effect) and → child proven dead. Prints JSON: per variant the
median over batches of the p50 first-effect latency and context time (ms), and the CPU per
context of the zygote and its reaped children (``/proc/<zygote>/stat``), never whole-machine CPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAINS = {
    "stdlib": "import json, urllib.request\n",
    "requests": "import requests\n",
}
WORKFLOW = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("a", lambda: 1)
"""


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _drive(handle, started: float) -> float:
    """Answer the one step; returns the ms from ``started`` until its effect had run."""
    first_effect = None
    while True:
        message = handle.recv(timeout=30)
        if message["op"] == "do":
            handle.send({"op": "run_effect", "attempt": 1})
        elif message["op"] == "effect_result":
            first_effect = (time.perf_counter() - started) * 1000
            handle.send({"op": "resolve", "result": message.get("result")})
        elif message["op"] == "run_returned":
            break
        elif message["op"] == "run_failed":
            raise RuntimeError(f"the workflow failed: {message.get('message')}")
        elif message["op"] not in ("log", "code"):
            raise RuntimeError(f"unexpected {message!r}")
    assert handle.kill_and_wait()
    assert first_effect is not None
    return first_effect


def _wheelhouse(directory: str | None, scratch: str) -> str:
    if directory:
        return directory
    target = os.path.join(scratch, "wheels")
    version = importlib.metadata.version("requests")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            target,
            f"requests=={version}",
        ],
        check=True,
    )
    return target


def run(args: argparse.Namespace) -> dict:
    """Install the layer, measure both variants on one zygote; returns the JSON summary."""
    scratch = tempfile.mkdtemp(prefix="takohost-packages-bench-")
    os.environ["TAKOHOST_PACKAGE_DIR"] = os.path.join(scratch, "packages")
    os.environ["TAKOHOST_WHEELHOUSE"] = _wheelhouse(args.wheelhouse, scratch)
    from workers import packages, sandbox

    pin = f"requests=={importlib.metadata.version('requests')}"
    installing = time.perf_counter()
    layer = packages.layer_for_spec({"requirements": [pin]})
    install_s = time.perf_counter() - installing

    def job(variant: str) -> dict:
        message = {
            "kind": "workflow", "mainModule": "main.py", "modules": {"main.py": MAINS[variant] + WORKFLOW},
            "className": "W", "event": {"instanceId": "bench"}, "vars": {}, "bindings": [],
        }  # fmt: skip
        if variant == "requests":
            message["packages"] = layer.name
        return message

    zygote = sandbox.Zygote()
    zygote.start()
    firsts: dict[str, list[float]] = {name: [] for name in MAINS}
    walls: dict[str, list[float]] = {name: [] for name in MAINS}
    cpus: dict[str, list[float]] = {name: [] for name in MAINS}
    try:
        for _ in range(args.rounds):
            for name in MAINS:
                message = job(name)
                before = _cpu_seconds(zygote.pid)
                first, total = [], []
                for _ in range(args.contexts):
                    started = time.perf_counter()
                    with zygote.spawn(message) as handle:
                        first.append(_drive(handle, started))
                    total.append((time.perf_counter() - started) * 1000)
                time.sleep(0.3)  # let the zygote reap the last children (their CPU lands in cutime)
                cpus[name].append((_cpu_seconds(zygote.pid) - before) * 1000 / args.contexts)
                firsts[name].append(statistics.median(first))
                walls[name].append(statistics.median(total))
    finally:
        zygote.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "pin": pin,
        "layer": {
            "packages": [f"{p['name']}=={p['version']}" for p in layer.packages],
            "bytes": layer.size_bytes,
        },
        "install_seconds": round(install_s, 2),
        "rounds": args.rounds,
        "contexts_per_batch": args.contexts,
        **{
            name: {
                "first_effect_p50_ms": round(statistics.median(firsts[name]), 2),
                "context_p50_ms": round(statistics.median(walls[name]), 2),
                "cpu_ms_per_context": round(statistics.median(cpus[name]), 2),
            }
            for name in MAINS
        },
        "load_average": os.getloadavg(),
    }


def main() -> None:
    """Command-line entry: print one JSON object."""
    parser = argparse.ArgumentParser(prog="bench.packages_bench")
    parser.add_argument(
        "--wheelhouse", help="wheels of requests and its dependencies (default: pip download)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating batches of each variant")
    parser.add_argument("--contexts", type=int, default=20, help="contexts per batch")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
