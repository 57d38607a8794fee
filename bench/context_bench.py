"""Replay contexts run in this process, one after another: the engine's host-side cost per context
without HTTP or Celery (docs/spec/host-features.md#hf-performance).

    python -m bench.context_bench                       # this checkout
    python -m bench.alternate --runs 5 \
        --variant new='.venv/bin/python -m bench.context_bench' \
        --variant old='cd ../other && .venv/bin/python -m bench.context_bench'   # side by side

One scratch stack (``bench.engine_bench.Scratch``: its database, Redis namespace and an idle API),
the 1-step workflow ``One`` of ``bench.engine_bench``, and ``--batches`` batches of
``--contexts`` instances: each batch is created first, then its contexts run one after another
in this process (``workers.engine.context.run_context``, the body of the Celery task). Per context
and as medians over the batches: this process's CPU (``/proc/self/stat`` utime + stime, milliseconds)
split into the contexts' own thread (``time.thread_time``) and the process's other threads (the
heartbeat, the pinger, the pre-spawn of the next child), and the wall time. The sandbox children
are the zygote's and not counted here (``bench.sandbox_bench`` measures them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _process_cpu_seconds() -> float:
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run(args: argparse.Namespace) -> dict:
    """One scratch stack, ``args.batches`` batches of ``args.contexts`` contexts; the JSON result."""
    from bench import engine_bench
    from models import db as models_db
    from services import dispatch, instances, tokens
    from workers.engine import context

    scratch = engine_bench.Scratch(workers=0, concurrency=1)
    queued: list[int] = []
    dispatch.run_context = queued.append  # contexts run here, not through the broker
    try:
        with models_db.session_scope(scratch.bench_url) as session:
            tokens.create_token_txn(session, space="bench")  # the Space
        workflow = engine_bench.deploy(scratch.bench_url, "bench")["One"]

        def batch(tag: str, count: int) -> tuple[float, float, float]:
            for i in range(count):
                instances.create(space="bench", workflow_uid=workflow, instance_id=f"{tag}-{i}")
            pks = list(queued)
            queued.clear()
            cpu, own, wall = _process_cpu_seconds(), time.thread_time(), time.perf_counter()
            outcomes = [context.run_context(pk) for pk in pks]
            wall = time.perf_counter() - wall
            own = time.thread_time() - own
            time.sleep(0.3)  # the pre-spawn of the last context's successor finishes
            cpu = _process_cpu_seconds() - cpu
            assert outcomes == ["complete"] * count, outcomes
            return cpu * 1000 / count, own * 1000 / count, wall * 1000 / count

        batch("warm", 20)
        results = [batch(f"b{n}", args.contexts) for n in range(args.batches)]
    finally:
        scratch.close()
    cpu = statistics.median(r[0] for r in results)
    own = statistics.median(r[1] for r in results)
    return {
        "contexts_per_batch": args.contexts,
        "batches": args.batches,
        "cpu_ms_per_context": round(cpu, 3),
        "context_thread_ms": round(own, 3),
        "other_threads_ms": round(statistics.median(r[0] - r[1] for r in results), 3),
        "wall_ms_per_context": round(statistics.median(r[2] for r in results), 3),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    """Command-line entry: print one JSON object."""
    parser = argparse.ArgumentParser(prog="bench.context_bench")
    parser.add_argument("--contexts", type=int, default=100, help="contexts per batch (default 100)")
    parser.add_argument("--batches", type=int, default=6, help="batches (default 6)")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    sys.exit(main())
