"""Compiled modules (PROTOCOL.md "Compiled modules"): a context that compiles its Version's source
against one that runs the code an earlier child compiled, side by side.

    python -m bench.code_cache_bench                 # an 800-line Version (60 helper functions)
    python -m bench.code_cache_bench --helpers 2     # a 30-line one

One zygote; the first child is asked for its code (``wantCode``); then ``--rounds`` alternating
batches of ``--contexts`` contexts each without and with that code, each a real job with one step
round trip, killed and proven dead. Prints JSON: per variant the median over batches of the
context's p50 (spawn request → proven dead, ms) and of the CPU per context of the zygote and its
reaped children (``/proc/<zygote>/stat``), never whole-machine CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import textwrap
import time

HELPER = '''
def helper_{i}(data, factor={i}):
    out = {{}}
    for key, value in data.items():
        if isinstance(value, int) and value > factor:
            out[key] = value * factor
        elif isinstance(value, str):
            out[key] = value.upper() + str(factor)
        else:
            out[key] = [v for v in (value or []) if v]
    return out
'''

MAIN = """
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("a", lambda: helper_1({"x": 3}))
"""


def source(helpers: int) -> str:
    """A Version module of ``helpers`` (≥ 2) helper functions and a one-step workflow class."""
    return "".join(textwrap.dedent(HELPER).format(i=i) for i in range(max(2, helpers))) + textwrap.dedent(MAIN)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _drive(handle) -> dict | None:
    """Answer one step; returns the child's ``code`` frame, if it sent one."""
    code = None
    while True:
        message = handle.recv(timeout=10)
        if message["op"] == "code":
            code = message
        elif message["op"] == "do":
            handle.send({"op": "run_effect", "attempt": 1})
        elif message["op"] == "effect_result":
            handle.send({"op": "resolve", "result": message.get("result")})
        elif message["op"] == "run_returned":
            break
        elif message["op"] != "log":
            raise RuntimeError(f"unexpected {message!r}")
    assert handle.kill_and_wait()
    return code


def run(args: argparse.Namespace) -> dict:
    """Measure both variants on one zygote; returns the JSON summary."""
    from workers import sandbox

    text = source(args.helpers)

    def job(**extra: object) -> dict:
        return {"kind": "workflow", "mainModule": "main.py", "modules": {"main.py": text}, "className": "W",
                "event": {"instanceId": "bench"}, "vars": {}, "bindings": [], **extra}

    zygote = sandbox.Zygote()
    zygote.start()
    try:
        with zygote.spawn(job(wantCode=True)) as handle:
            frame = _drive(handle)
        assert frame is not None, "the child sent no code frame"
        code = frame["modules"]
        walls: dict[str, list[float]] = {"source": [], "code": []}
        cpus: dict[str, list[float]] = {"source": [], "code": []}
        for _ in range(args.rounds):
            for name, message in (("source", job()), ("code", job(code=code))):
                before = _cpu_seconds(zygote.pid)
                times = []
                for _ in range(args.contexts):
                    started = time.perf_counter()
                    with zygote.spawn(message) as handle:
                        _drive(handle)
                    times.append((time.perf_counter() - started) * 1000)
                time.sleep(0.3)  # let the zygote reap the last children (their CPU lands in cutime)
                cpus[name].append((_cpu_seconds(zygote.pid) - before) * 1000 / args.contexts)
                walls[name].append(statistics.median(times))
    finally:
        zygote.stop()
    return {
        "source_lines": text.count("\n"),
        "code_chars": sum(len(blob) for blob in code.values()),
        "rounds": args.rounds,
        "contexts_per_batch": args.contexts,
        **{
            name: {
                "context_p50_ms": round(statistics.median(walls[name]), 2),
                "cpu_ms_per_context": round(statistics.median(cpus[name]), 2),
            }
            for name in walls
        },
        "load_average": os.getloadavg(),
    }


def main() -> None:
    """Command-line entry: print one JSON object."""
    parser = argparse.ArgumentParser(prog="bench.code_cache_bench")
    parser.add_argument("--helpers", type=int, default=60, help="helper functions in the module (default 60)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating batches of each variant")
    parser.add_argument("--contexts", type=int, default=40, help="contexts per batch")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
