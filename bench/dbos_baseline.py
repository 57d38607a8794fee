"""The same workloads with DBOS Transact on the same Postgres, side by side with takohost
(docs/spec/host-features.md#hf-engine, docs/spec/host-features.md#hf-performance: "always compare side by side in one run").

    python -m bench.dbos_baseline                    # 3 alternating runs of each; medians and ratios
    python -m bench.dbos_baseline --runs 1 --instances 100 --latency-samples 30   # a quick look
    python -m bench.dbos_baseline --dbos-only        # one DBOS run, its JSON

DBOS runs in a process of its own with its defaults (its executor threads run the workflows;
every step is one Postgres commit in its system database): N workflows of 10 trivial steps
started at once, create → first step (unloaded, and under the burst), 1-step start → result,
and ``send`` → ``recv``-resumed latency. Its CPU per instance is that process's (``os.times``:
all its threads, the starting ones included) plus its Postgres backends' (``/proc``). The takohost
half is ``bench.engine_bench`` (``takohost api`` + ``takohost worker --concurrency 2``, every
request over HTTP, CPU per process from ``/proc``). Each run is a fresh process; the halves
alternate (DBOS, takohost, DBOS, …) so that the machine's other load falls on both alike, and the
medians of the runs are compared. ``uptime`` load averages are printed with every run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

from bench import engine_bench, proc_cpu

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
    def one() -> float:
        return stamp()

    @DBOS.workflow()
    def waiter() -> float:
        DBOS.recv("go", timeout_seconds=3600)
        return stamp()

    DBOS.launch()
    try:
        for _ in range(8):
            DBOS.start_workflow(ten).get_result()
        unloaded, one_step = [], []
        for _ in range(args.latency_samples):
            started = time.time()
            result = DBOS.start_workflow(ten).get_result()
            unloaded.append(result["first"] - started)
            started = time.time()
            DBOS.start_workflow(one).get_result()
            one_step.append(time.time() - started)

        backends = proc_cpu.Backends(lambda: _backends(name))
        cpu_before = proc_cpu.self_seconds(), 0.0
        busy_before = engine_bench.busy_cpu_seconds()
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.create_threads) as pool:
            started_handles = list(
                pool.map(lambda _: (time.time(), DBOS.start_workflow(ten)), range(args.instances))
            )
        created = time.time()
        results = [(started, handle.get_result()) for started, handle in started_handles]
        burst_cpu = engine_bench.busy_cpu_seconds() - busy_before
        cpu_after = proc_cpu.self_seconds(), backends.seconds()
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
            "cpu_ms_per_instance": proc_cpu.difference_ms_per(
                {"process": cpu_before[0], "postgres_backends": cpu_before[1]},
                {"process": cpu_after[0], "postgres_backends": cpu_after[1]},
                args.instances,
            ),
            "machine_cpu_ms_per_instance": round(burst_cpu * 1000 / args.instances, 2),
            "create_to_first_effect_unloaded": engine_bench.summary_ms(unloaded),
            "one_step_create_to_complete": engine_bench.summary_ms(one_step),
            "create_to_first_effect_burst": engine_bench.summary_ms(burst),
            "send_event_to_wait_resumed": engine_bench.summary_ms(resumed),
            "load_average": os.getloadavg(),
        }
    finally:
        DBOS.destroy()
        admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _backends(database: str) -> list[int]:
    """Pids of the Postgres backends on ``database`` (DBOS's pool), not counting the asking one."""
    import sqlalchemy as sa

    admin = sa.create_engine(ADMIN_URL, poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"),
            {"d": database}).scalars())


#: (key, direction): "higher" — takohost ÷ DBOS (above 1 = takohost better); "lower" — the
#: figure of takohost ÷ DBOS's (below 1 = takohost better), as the issue states its targets.
COMPARED = (
    ("steps_per_s", "higher"),
    ("cpu_ms_per_instance.total", "lower"),
    ("create_to_first_effect_unloaded.p50_ms", "lower"),
    ("create_to_first_effect_unloaded.p99_ms", "lower"),
    ("one_step_create_to_complete.p50_ms", "lower"),
    ("send_event_to_wait_resumed.p50_ms", "lower"),
)


def _get(result: dict, dotted: str) -> float:
    for part in dotted.split("."):
        result = result[part]
    return float(result)  # type: ignore[arg-type]


def ratio(ours: dict, theirs: dict) -> dict:
    """Per compared figure: ``takohost / dbos`` (for steps/s above 1 is better, for CPU and
    latency below 1 is better)."""
    return {key: round(_get(ours, key) / _get(theirs, key), 2) for key, _ in COMPARED}


def _median_figures(results: list[dict]) -> dict:
    return {key: round(statistics.median(_get(r, key) for r in results), 2) for key, _ in COMPARED}


def _run_child(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout[done.stdout.index("{"):])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of each (default 3)")
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--create-threads", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="takohost worker commands")
    parser.add_argument("--pool", choices=("solo", "prefork"), default="solo", help="their --pool")
    parser.add_argument("--concurrency", type=int, default=2, help="their --concurrency (one per core)")
    parser.add_argument("--dbos-only", action="store_true", help="one DBOS run in this process")
    args = parser.parse_args(argv)
    os.environ.setdefault("DBOS__APPVERSION", "bench")
    if args.dbos_only:
        print(json.dumps(run_dbos(args), indent=2))
        return
    common = [f"--instances={args.instances}", f"--latency-samples={args.latency_samples}",
              f"--create-threads={args.create_threads}"]
    ours_argv = ["bench.engine_bench", *common, f"--workers={args.workers}", f"--pool={args.pool}",
                 f"--concurrency={args.concurrency}"]
    runs: list[dict] = []
    for index in range(args.runs):
        for engine, child in (("dbos", ["bench.dbos_baseline", "--dbos-only", *common]), ("takohost", ours_argv)):
            load = os.getloadavg()
            result = _run_child(child)
            runs.append({"engine": engine, "run": index, "load_before": load, "result": result})
            print(json.dumps({"engine": engine, "run": index, "load_before": load,
                              "figures": {key: _get(result, key) for key, _ in COMPARED},
                              "cpu_ms_per_instance": result["cpu_ms_per_instance"]}), flush=True)
    theirs = _median_figures([r["result"] for r in runs if r["engine"] == "dbos"])
    ours = _median_figures([r["result"] for r in runs if r["engine"] == "takohost"])
    print(json.dumps({
        "medians_of_runs": args.runs,
        "dbos": theirs,
        "takohost": ours,
        "takohost_over_dbos": {key: round(ours[key] / theirs[key], 2) for key, _ in COMPARED},
        "cpu_breakdown_takohost_last_run": runs[-1]["result"]["cpu_ms_per_instance"],
        "load_average_now": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
