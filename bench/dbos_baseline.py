"""The same 10-step workload with DBOS Transact on the same Postgres, side by side with takohost
(issue 3 item 13; ANCHORS.md: "always compare side by side in one run").

    python -m bench.dbos_baseline                    # DBOS, then takohost; prints both and the ratio
    python -m bench.dbos_baseline --dbos-only

DBOS runs in this process with its defaults (its executor threads run the workflows; every step
is one Postgres commit in its system database): N workflows of 10 trivial steps started at once,
create → first step (unloaded and under the burst) and ``send`` → ``recv``-resumed latency. The
takohost half is ``bench.engine_bench.run`` with the same N (run after DBOS has shut down).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time
import uuid

from bench import engine_bench

ADMIN_URL = engine_bench.ADMIN_URL


def run_dbos(args: argparse.Namespace) -> dict:
    """Run the workload on DBOS; returns the same JSON shape as ``engine_bench.run``."""
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig

    name = f"dbos_bench_{uuid.uuid4().hex[:8]}"
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql+psycopg://", "postgresql://")
    config: DBOSConfig = {
        "name": "takohost-baseline",
        "system_database_url": f"{base}/{name}",
        "log_level": "WARNING",
        "console_log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def stamp() -> float:
        return time.time()

    @DBOS.step()
    def trivial(i: int) -> dict:
        return {"i": i}

    @DBOS.workflow()
    def ten() -> dict:
        first = stamp()
        for i in range(1, 10):
            trivial(i)
        return {"first": first, "last": time.time()}

    @DBOS.workflow()
    def waiter() -> float:
        DBOS.recv("go", timeout_seconds=3600)
        return stamp()

    DBOS.launch()
    try:
        for _ in range(8):
            DBOS.start_workflow(ten).get_result()
        unloaded = []
        for _ in range(args.latency_samples):
            started = time.time()
            result = DBOS.start_workflow(ten).get_result()
            unloaded.append(result["first"] - started)

        busy_before = engine_bench.busy_cpu_seconds()
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.create_threads) as pool:
            started_handles = list(
                pool.map(lambda _: (time.time(), DBOS.start_workflow(ten)), range(args.instances))
            )
        created = time.time()
        results = [(started, handle.get_result()) for started, handle in started_handles]
        burst_cpu = engine_bench.busy_cpu_seconds() - busy_before
        last_done = max(result["last"] for _, result in results)
        burst = [result["first"] - started for started, result in results]
        elapsed = last_done - began

        handles = [DBOS.start_workflow(waiter) for _ in range(args.latency_samples)]
        time.sleep(1.0)  # every waiter reaches recv
        resumed = []
        for handle in handles:
            sent = time.time()
            DBOS.send(handle.get_workflow_id(), "go", topic="go")
            resumed.append(handle.get_result() - sent)
        return {
            "engine": "dbos",
            "instances": args.instances,
            "steps_per_instance": 10,
            "create_seconds": round(created - began, 3),
            "elapsed_seconds": round(elapsed, 3),
            "instances_per_s": round(args.instances / elapsed, 1),
            "steps_per_s": round(args.instances * 10 / elapsed, 1),
            "machine_cpu_ms_per_instance": round(burst_cpu * 1000 / args.instances, 2),
            "create_to_first_effect_unloaded": engine_bench.summary_ms(unloaded),
            "create_to_first_effect_burst": engine_bench.summary_ms(burst),
            "send_event_to_wait_resumed": engine_bench.summary_ms(resumed),
        }
    finally:
        DBOS.destroy()
        admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def ratio(ours: dict, theirs: dict) -> dict:
    """takohost ÷ DBOS for throughput, DBOS ÷ takohost for CPU per instance and latency p50
    (above 1 = takohost better)."""

    def p50(result: dict, key: str) -> float:
        return result[key]["p50_ms"]

    return {
        "steps_per_s": round(ours["steps_per_s"] / theirs["steps_per_s"], 2),
        "machine_cpu_per_instance": round(
            theirs["machine_cpu_ms_per_instance"] / ours["machine_cpu_ms_per_instance"], 2
        ),
        "create_to_first_effect_unloaded_p50": round(
            p50(theirs, "create_to_first_effect_unloaded") / p50(ours, "create_to_first_effect_unloaded"), 2
        ),
        "send_event_to_wait_resumed_p50": round(
            p50(theirs, "send_event_to_wait_resumed") / p50(ours, "send_event_to_wait_resumed"), 2
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--create-threads", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="takohost worker processes (one per core)")
    parser.add_argument(
        "--pool", choices=("solo", "prefork"), default="solo", help="takohost workers' Celery pool"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="takohost pool processes per worker")
    parser.add_argument("--dbos-only", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("DBOS__APPVERSION", "bench")
    theirs = run_dbos(args)
    if args.dbos_only:
        print(json.dumps(theirs, indent=2))
        return
    ours = engine_bench.run(args)
    print(
        json.dumps(
            {"dbos": theirs, "takohost": ours, "ratio_takohost_vs_dbos": ratio(ours, theirs)}, indent=2
        )
    )


if __name__ == "__main__":
    main()
