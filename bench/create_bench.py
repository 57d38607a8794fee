"""The API's create path alone (docs/spec/host-features.md#hf-performance): ``POST …/instances`` over HTTP against
``takohost api`` with no worker (the messages just queue), one request at a time.

    python -m bench.create_bench --creates 1000

Prints one JSON object: create latency p50/p99 (client side, keep-alive connection) and CPU per
create counted per process (``bench.proc_cpu``: the API's processes and the host's Postgres
backends). Run it in alternation with another checkout (``bench.alternate``) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench import engine_bench, proc_cpu


def run(args: argparse.Namespace) -> dict:
    """One scratch stack (API only), ``args.creates`` creates after a warm-up; the JSON result."""
    from models import db as models_db
    from services import tokens

    scratch = engine_bench.Scratch(workers=0, concurrency=1, api_workers=1)
    try:
        with models_db.session_scope(scratch.bench_url) as session:
            token = tokens.create_token_txn(session, space="bench")
        ten = engine_bench.deploy(scratch.bench_url, "bench")["Ten"]
        client = engine_bench.Client(scratch.api_url, token, "bench")
        for i in range(200):
            client.create(ten, f"warm{i}")
        backends = proc_cpu.Backends(scratch.backends)
        before = {**proc_cpu.snapshot({"api": scratch.api.pid}), "postgres_backends": 0.0}
        latencies = []
        for i in range(args.creates):
            started = time.perf_counter()
            client.create(ten, f"c{i}")
            latencies.append(time.perf_counter() - started)
        after = {**proc_cpu.snapshot({"api": scratch.api.pid}), "postgres_backends": backends.seconds()}
        return {
            "creates": args.creates,
            "create_latency": engine_bench.summary_ms(latencies),
            "cpu_ms_per_create": proc_cpu.difference_ms_per(before, after, args.creates),
            "load_average": os.getloadavg(),
        }
    finally:
        scratch.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=1000)
    print(json.dumps(run(parser.parse_args(argv)), indent=2))


if __name__ == "__main__":
    main()
