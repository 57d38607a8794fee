"""Benchmark the durable-workflow engine on the local stack (issue 3 item 13; ANCHORS.md).

Prints one JSON object: instances/s and steps/s of N instances of a 10-step workflow (trivial
effects) started at once, create → first-effect latency (p50/p99; unloaded, one instance at a time,
and under the burst), and send_event → wait-resumed latency (p50/p99).

    python -m bench.engine_bench                      # scratch database, own namespace and worker
    python -m bench.engine_bench --instances 500 --workers 2 --pool solo --concurrency 1
    python -m bench.engine_bench --workers 1 --pool prefork --concurrency 2

It creates a scratch database on the local Postgres (``TAKOHOST_TEST_PG``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), migrates it, deploys the workflows by
inserting their resources directly, starts ``takohost worker`` processes against it under a
private Redis namespace, and creates instances in-process through ``workers.services.instances``
(the code path the API uses, without HTTP). Effects stamp ``time.time()`` into their results, so
latencies are measured from the records, not from polling.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ADMIN_URL = os.environ.get("TAKOHOST_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")

TEN_STEPS = """
import time
class Ten:
    def __init__(self, env):
        pass
    def run(self, event, step):
        first = step.do("s0", lambda: {"t": time.time()})
        for i in range(1, 10):
            step.do(f"s{i}", lambda: {"i": i})
        return {"first": first["t"], "last": time.time()}

class Waiter:
    def __init__(self, env):
        pass
    def run(self, event, step):
        step.wait_for_event("w", {"type": "go", "timeoutSeconds": 3600})
        return step.do("after", lambda: {"t": time.time()})
"""


def busy_cpu_seconds() -> float:
    """CPU seconds this machine has spent busy (all processes, all cores; Linux ``/proc/stat``):
    the burst's difference divided by its instances is the whole stack's CPU cost per instance
    (creating, dispatching, the workers, the sandbox children, Postgres, Redis), a figure that
    varies much less between runs than throughput on a shared machine."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait (steal, fields[7], is not ours)
    return (sum(fields[:7]) - idle) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def summary_ms(values: list[float]) -> dict:
    """``{"p50_ms", "p99_ms", "n"}`` of latencies given in seconds."""
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 0.99) * 1000, 2),
        "n": len(values),
    }


class Scratch:
    """A scratch database + Redis namespace + worker processes; ``close()`` removes everything."""

    def __init__(self, *, workers: int, concurrency: int, pool: str = "prefork") -> None:
        import sqlalchemy as sa

        self.name = f"takohost_bench_{uuid.uuid4().hex[:8]}"
        self.url = ADMIN_URL.rsplit("/", 1)[0] + "/" + self.name
        self.namespace = f"tkb{uuid.uuid4().hex[:8]}"
        self.admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        os.environ["TAKOHOST_DATABASE_URL"] = self.url
        os.environ["TAKOHOST_NAMESPACE"] = self.namespace
        from models import migrate

        migrate.upgrade(self.url)
        self.workers: list[subprocess.Popen] = []
        self.logs: list[str] = []
        for _ in range(workers):
            log = tempfile.NamedTemporaryFile(prefix="takohost-bench-worker-", suffix=".log", delete=False)
            self.logs.append(log.name)
            self.workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "host_cli",
                        "worker",
                        f"--concurrency={concurrency}",
                        f"--pool={pool}",
                        "--loglevel=WARNING",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ),
                    start_new_session=True,
                )
            )
        time.sleep(0.5)

    def close(self) -> None:
        import signal

        import redis
        import sqlalchemy as sa

        from models import db as models_db
        from takohost import config

        for worker in self.workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        client = redis.Redis.from_url(config.load_settings().redis_url)
        keys = list(client.scan_iter(match=f"{self.namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
        models_db.dispose_all()
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))


def deploy(url: str, space: str) -> dict[str, str]:
    """Insert Worker, Version, Deployment and the two DurableWorkflows; returns {class: uid}."""
    from models import db as models_db
    from models import resources as res_models
    from models.base import utcnow

    def resource(session, form: str, spec: dict, worker_uid: str | None, observed: dict | None = None) -> str:
        uid = str(uuid.uuid4())
        now = utcnow()
        session.add(
            res_models.Resource(
                uid=uid,
                space=space,
                form=form,
                name=f"b{uid[:12]}",
                generation=1,
                spec=spec,
                observed=observed or {},
                output={},
                phase="idle",
                worker_uid=worker_uid,
                created_at=now,
                updated_at=now,
            )
        )
        session.flush()
        return uid

    with models_db.session_scope(url) as session:
        worker = resource(session, "ModuleWorker", {}, None)
        version = resource(
            session,
            "WorkerVersion",
            {
                "worker": {"resourceUid": worker},
                "mainModule": "main.py",
                "modules": {"main.py": TEN_STEPS},
                "vars": {},
                "workflowBindings": [],
            },
            worker,
            observed={"validated": True, "workflowClasses": ["Ten", "Waiter"], "handlers": []},
        )
        resource(
            session,
            "WorkerDeployment",
            {
                "worker": {"resourceUid": worker},
                "versions": [{"version": {"resourceUid": version}, "weight": 100}],
            },
            worker,
        )
        return {
            name: resource(
                session, "DurableWorkflow", {"worker": {"resourceUid": worker}, "className": name}, worker
            )
            for name in ("Ten", "Waiter")
        }


def wait_all(
    url: str, workflow: str, ids: list[str], *, status: str, timeout: float, interval: float = 0.1
) -> dict[str, dict]:
    """Poll until every instance has ``status``; returns {id: output}. Each round counts rows by
    status in Postgres (cheap for the stack under test); the outputs are read once at the end."""
    import sqlalchemy as sa

    from models import db as models_db
    from models import instances as inst_models

    table = inst_models.Instance
    scope = (table.workflow_uid == workflow, table.instance_id.in_(ids))
    deadline = time.monotonic() + timeout
    while True:
        with models_db.session_scope(url) as session:
            counts = dict(
                session.execute(
                    sa.select(table.status, sa.func.count()).where(*scope).group_by(table.status)
                ).all()
            )
        if counts.get("errored") or counts.get("terminated"):
            with models_db.session_scope(url) as session:
                bad = session.execute(
                    sa.select(table.instance_id, table.status, table.error)
                    .where(*scope, table.status.in_(("errored", "terminated")))
                    .limit(1)
                ).one()
            raise RuntimeError(f"{bad.instance_id}: {bad.status} {bad.error}")
        if counts.get(status, 0) == len(ids):
            with models_db.session_scope(url) as session:
                return dict(session.execute(sa.select(table.instance_id, table.output).where(*scope)).all())
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids) - counts.get(status, 0)} instances not {status} after {timeout}s")
        time.sleep(interval)


def run(args: argparse.Namespace) -> dict:
    """Run all phases on a scratch stack; returns the JSON result."""
    scratch = Scratch(workers=args.workers, concurrency=args.concurrency, pool=args.pool)
    try:
        from models import db as models_db
        from workers.services import instance_events, instances, tokens

        space = "bench"
        with models_db.session_scope(scratch.url) as session:
            tokens.create_token_txn(session, space=space)
        uids = deploy(scratch.url, space)
        ten, waiter = uids["Ten"], uids["Waiter"]

        def create(workflow: str, instance_id: str) -> float:
            started = time.time()
            instances.create(space=space, workflow_uid=workflow, instance_id=instance_id)
            return started

        # warm-up: every pool process starts its zygote and connections
        warm = [f"warm{i}" for i in range(args.concurrency * args.workers * 4)]
        for instance_id in warm:
            create(ten, instance_id)
        wait_all(scratch.url, ten, warm, status="complete", timeout=120)

        # unloaded create → first effect: one instance at a time
        unloaded = []
        for i in range(args.latency_samples):
            instance_id = f"lat{i}"
            started = create(ten, instance_id)
            output = wait_all(scratch.url, ten, [instance_id], status="complete", timeout=60, interval=0.005)
            unloaded.append(output[instance_id]["first"] - started)

        # burst: N instances created at once from a few threads
        ids = [f"i{i}" for i in range(args.instances)]
        busy_before = busy_cpu_seconds()
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.create_threads) as pool:
            starts = dict(zip(ids, pool.map(lambda i: create(ten, i), ids), strict=True))
        created = time.time()
        outputs = wait_all(scratch.url, ten, ids, status="complete", timeout=600, interval=0.25)
        burst_cpu = busy_cpu_seconds() - busy_before
        last_done = max(output["last"] for output in outputs.values())
        burst = [outputs[i]["first"] - starts[i] for i in ids]
        elapsed = last_done - began

        # send_event → wait resumed
        waits = [f"w{i}" for i in range(args.latency_samples)]
        for instance_id in waits:
            create(waiter, instance_id)
        wait_all(scratch.url, waiter, waits, status="waiting", timeout=120)
        resumed = []
        for instance_id in waits:
            sent = time.time()
            instance_events.send_event(
                space=space, workflow_uid=waiter, instance_id=instance_id, event_type="go"
            )
            output = wait_all(
                scratch.url, waiter, [instance_id], status="complete", timeout=60, interval=0.005
            )
            resumed.append(output[instance_id]["t"] - sent)

        return {
            "engine": "takohost",
            "instances": args.instances,
            "steps_per_instance": 10,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "pool": args.pool,
            "create_seconds": round(created - began, 3),
            "elapsed_seconds": round(elapsed, 3),
            "instances_per_s": round(args.instances / elapsed, 1),
            "steps_per_s": round(args.instances * 10 / elapsed, 1),
            "machine_cpu_ms_per_instance": round(burst_cpu * 1000 / args.instances, 2),
            "create_to_first_effect_unloaded": summary_ms(unloaded),
            "create_to_first_effect_burst": summary_ms(burst),
            "send_event_to_wait_resumed": summary_ms(resumed),
        }
    finally:
        scratch.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=200, help="instances in the burst (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2: one per core)")
    parser.add_argument(
        "--pool",
        choices=("solo", "prefork"),
        default="solo",
        help="Celery pool of each worker (default solo)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="pool processes per worker (default 1; solo needs 1)"
    )
    parser.add_argument(
        "--create-threads", type=int, default=4, help="threads creating the burst (default 4)"
    )
    parser.add_argument("--latency-samples", type=int, default=100, help="samples per latency (default 100)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
