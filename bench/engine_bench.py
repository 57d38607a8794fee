"""Benchmark the durable-workflow engine on the local stack (docs/spec/host-features.md#hf-engine, docs/spec/host-features.md#hf-performance).

Prints one JSON object: instances/s and steps/s of N instances of a 10-step workflow (trivial
effects) started at once, CPU per instance counted per process (``bench.proc_cpu``: the API's
and workers' process trees, the scratch database's Postgres backends and the Redis server, when it
runs on this machine — on a shared Redis, other clients' work counts too), create →
first-effect latency (p50/p99; unloaded, one instance at a time, and under the burst), 1-step
create → complete, and send_event → wait-resumed latency (p50/p99), all over HTTP. 1-step create →
complete is when a poll (every 0.5 ms) first sees ``complete``; ``one_step_create_to_terminal_at``
is the same interval to the instance's recorded ``terminalAt`` instead.

    python -m bench.engine_bench                       # takohost worker --concurrency 2 (default pool)
    python -m bench.engine_bench --pool prefork        # takohost worker --pool prefork --concurrency 2
    python -m bench.engine_bench --workers 2 --concurrency 1 --instances 500

It creates a scratch database on the local Postgres (``TAKOHOST_TEST_PG``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), migrates it, deploys the workflows by
inserting their resources directly, starts ``takohost api`` and ``takohost worker`` processes
against it under a private Redis namespace, and creates instances and sends events over HTTP.
Effects stamp ``time.time()`` into their results, so the other latencies are measured from the
records, not from polling.
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

class One:
    def __init__(self, env):
        pass
    def run(self, event, step):
        return step.do("only", lambda: {"t": time.time()})

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
    """A scratch database + Redis namespace + ``takohost api`` and worker processes; ``close()``
    removes everything. ``bench_url`` is the database URL of this process's own reads (tagged
    ``application_name=bench``, so its Postgres backends are not counted as the host's)."""

    def __init__(self, *, workers: int, concurrency: int, pool: str = "solo", api_workers: int = 1) -> None:
        import sqlalchemy as sa

        self.name = f"takohost_bench_{uuid.uuid4().hex[:8]}"
        self.url = ADMIN_URL.rsplit("/", 1)[0] + "/" + self.name
        self.bench_url = self.url + "?application_name=bench"
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
            self.workers.append(self._start("worker", [f"--concurrency={concurrency}", f"--pool={pool}",
                                                       "--loglevel=WARNING"]))
        self.port = _free_port()
        self.api = self._start("api", [f"--port={self.port}", f"--workers={api_workers}"])
        self.api_url = f"http://127.0.0.1:{self.port}"
        _wait_http(self.api_url + "/healthz", self.api)
        time.sleep(0.5)

    def _start(self, command: str, args: list[str]) -> subprocess.Popen:
        log = tempfile.NamedTemporaryFile(prefix=f"takohost-bench-{command}-", suffix=".log", delete=False)
        self.logs.append(log.name)
        return subprocess.Popen([sys.executable, "-m", "host_cli", command, *args], stdout=log,
                                stderr=subprocess.STDOUT, env=dict(os.environ), start_new_session=True)

    def roots(self) -> dict[str, int]:
        """Root pid per host process tree: ``api``, ``worker0``…"""
        return {"api": self.api.pid, **{f"worker{i}": w.pid for i, w in enumerate(self.workers)}}

    def redis_server(self) -> int | None:
        """Pid of the Redis server the host uses (``INFO server``'s ``process_id``), when it runs
        on this machine (a Unix socket or a local address); ``None`` when it is elsewhere. Its CPU
        counts in the total: every lease, fleet-slot and broker round trip is work we run."""
        import redis

        from core import config

        info = redis.Redis.from_url(config.load_settings().redis_url).info("server")
        pid = int(info.get("process_id", 0))
        return pid if pid and os.path.exists(f"/proc/{pid}") else None

    def backends(self) -> list[int]:
        """Pids of the host's Postgres backends on the scratch database (not this process's)."""
        import sqlalchemy as sa

        with self.admin.connect() as conn:
            return list(conn.execute(sa.text(
                "SELECT pid FROM pg_stat_activity WHERE datname = :d AND application_name <> 'bench'"
                " AND pid <> pg_backend_pid()"), {"d": self.name}).scalars())

    def commits(self) -> int:
        """Transactions committed on the scratch database so far (``pg_stat_database``, flushed
        by the backends within about a second)."""
        import sqlalchemy as sa

        with self.admin.connect() as conn:
            return conn.execute(sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = :d"),
                                {"d": self.name}).scalar_one()

    def close(self) -> None:
        import signal

        import redis
        import sqlalchemy as sa

        from core import config
        from models import db as models_db

        for proc in [*self.workers, self.api]:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.workers, self.api]:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        client = redis.Redis.from_url(config.load_settings().redis_url)
        keys = list(client.scan_iter(match=f"{self.namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
        models_db.dispose_all()
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


class Client:
    """The public HTTP API of one scratch stack, one keep-alive connection per thread."""

    def __init__(self, base: str, token: str, space: str) -> None:
        import threading
        import urllib.parse

        parsed = urllib.parse.urlsplit(base)
        self.host, self.port = parsed.hostname, parsed.port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.space = space
        self.local = threading.local()

    def post(self, path: str, body: dict) -> dict:
        """POST ``body`` (JSON) to ``/v2/spaces/{space}{path}``; returns the JSON answer (2xx)."""
        import http.client

        for attempt in (1, 2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                conn.request("POST", f"/v2/spaces/{self.space}{path}", body=json.dumps(body),
                             headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # the server closed an idle keep-alive connection before reading this request
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if (response.getheader("Connection") or "").lower() == "close":
                conn.close()
                self.local.conn = None
            break
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: {response.status} {raw[:300]!r}")
        return json.loads(raw) if raw else {}

    def create(self, workflow: str, instance_id: str) -> float:
        """Create instance ``instance_id``; returns ``time.time()`` just before the request."""
        started = time.time()
        self.post(f"/resources/{workflow}/instances", {"id": instance_id})
        return started

    def send_event(self, workflow: str, instance_id: str, event_type: str) -> float:
        """Send an event; returns ``time.time()`` just before the request."""
        started = time.time()
        self.post(f"/resources/{workflow}/instances/{instance_id}/events", {"type": event_type})
        return started


def deploy(url: str, space: str, *, source: str = TEN_STEPS,
           classes: tuple[str, ...] = ("Ten", "One", "Waiter")) -> dict[str, str]:
    """Insert Worker, Version (``source``), applied Deployment and a DurableWorkflow per class of
    ``classes``; returns {class: uid}."""
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
                "modules": {"main.py": source},
                "vars": {},
                "workflowBindings": [],
            },
            worker,
            observed={"validated": True, "workflowClasses": list(classes), "handlers": []},
        )
        versions = [{"version": {"resourceUid": version}, "weight": 100}]
        # observed.versions: the applied allocation (a create is refused before it is applied)
        resource(session, "WorkerDeployment", {"worker": {"resourceUid": worker}, "versions": versions},
                 worker, observed={"versions": versions})
        return {
            name: resource(
                session, "DurableWorkflow", {"worker": {"resourceUid": worker}, "className": name}, worker
            )
            for name in classes
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


def observed_seconds(conn, workflow: str, instance_id: str, *, status: str, timeout: float = 60.0,
                     interval: float = 0.0005) -> float:
    """Poll one instance's status every ``interval`` seconds on the psycopg connection ``conn``;
    returns ``time.time()`` of the first poll that sees ``status``: when a client can see it (at
    most one interval plus one round trip late)."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            "SELECT status FROM instances WHERE workflow_uid = %s AND instance_id = %s", (workflow, instance_id)
        ).fetchone()
        if row is not None and row[0] == status:
            return time.time()
        if row is not None and row[0] in ("errored", "terminated"):
            raise RuntimeError(f"{instance_id}: {row[0]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{instance_id} not {status} after {timeout}s")
        time.sleep(interval)


def terminal_seconds(url: str, workflow: str, instance_id: str) -> float:
    """``terminal_at`` of one instance (the host's commit of its end), seconds since the epoch."""
    import sqlalchemy as sa

    from models import db as models_db
    from models import instances as inst_models

    table = inst_models.Instance
    with models_db.session_scope(url) as session:
        return session.scalar(
            sa.select(table.terminal_at).where(table.workflow_uid == workflow, table.instance_id == instance_id)
        ).timestamp()


def run(args: argparse.Namespace) -> dict:
    """Run all phases on a scratch stack, every request over HTTP; returns the JSON result.

    CPU per instance of the burst is counted per process from ``/proc`` (``bench.proc_cpu``): the
    API's and each worker's process tree (supervisor or Celery main, worker/pool processes, zygotes
    with their sandbox children) and the host's Postgres backends — not this load generator.

    One Space, as a single-tenant host runs it: every worker slot (``TAKOHOST_SPACE_RESERVED_SLOTS=0``
    unless set; on the default a lone Space runs one context fewer than the fleet's slots)."""
    os.environ.setdefault("TAKOHOST_SPACE_RESERVED_SLOTS", "0")
    from bench import proc_cpu
    from models import db as models_db
    from services import tokens

    scratch = Scratch(workers=args.workers, concurrency=args.concurrency, pool=args.pool,
                      api_workers=getattr(args, "api_workers", 1))
    try:
        space = "bench"
        with models_db.session_scope(scratch.bench_url) as session:
            token = tokens.create_token_txn(session, space=space)
        uids = deploy(scratch.bench_url, space)
        ten, one, waiter = uids["Ten"], uids["One"], uids["Waiter"]
        client = Client(scratch.api_url, token, space)
        url = scratch.bench_url

        # warm-up: every process starts its zygote and connections, the API its pool
        warm = [f"warm{i}" for i in range(args.concurrency * args.workers * 4)]
        for instance_id in warm:
            client.create(ten, instance_id)
        wait_all(url, ten, warm, status="complete", timeout=120)

        # unloaded create → first effect, and 1-step create → complete: one instance at a time
        unloaded, one_step, one_step_stamped = [], [], []
        import psycopg

        from models import db as models_db

        poller = psycopg.connect(**models_db.connect_kwargs(url), autocommit=True)
        for i in range(args.latency_samples):
            instance_id = f"lat{i}"
            started = client.create(ten, instance_id)
            output = wait_all(url, ten, [instance_id], status="complete", timeout=60, interval=0.002)
            unloaded.append(output[instance_id]["first"] - started)
            started = client.create(one, instance_id)
            seen = observed_seconds(poller, one, instance_id, status="complete")
            one_step.append(seen - started)  # what a client sees: the terminal commit included
            one_step_stamped.append(terminal_seconds(url, one, instance_id) - started)
        poller.close()

        # burst: N instances created at once from a few threads
        ids = [f"i{i}" for i in range(args.instances)]
        time.sleep(1.5)  # let the backends flush their transaction counts
        commits_before = scratch.commits()
        backends = proc_cpu.Backends(scratch.backends)
        redis_pid = scratch.redis_server()

        def redis_seconds() -> dict[str, float]:
            return {"redis_server": proc_cpu.process_seconds(redis_pid, children=False)} if redis_pid else {}

        cpu_before = {**proc_cpu.snapshot(scratch.roots()), "postgres_backends": 0.0, **redis_seconds()}
        busy_before = busy_cpu_seconds()
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.create_threads) as pool:
            starts = dict(zip(ids, pool.map(lambda i: client.create(ten, i), ids), strict=True))
        created = time.time()
        outputs = wait_all(url, ten, ids, status="complete", timeout=600, interval=0.25)
        cpu_after = {**proc_cpu.snapshot(scratch.roots()), "postgres_backends": backends.seconds(), **redis_seconds()}
        burst_cpu = busy_cpu_seconds() - busy_before
        time.sleep(1.5)
        commits = scratch.commits() - commits_before  # includes this bench's ~4 polls a second
        last_done = max(output["last"] for output in outputs.values())
        burst = [outputs[i]["first"] - starts[i] for i in ids]
        elapsed = last_done - began

        # send_event → wait resumed
        waits = [f"w{i}" for i in range(args.latency_samples)]
        for instance_id in waits:
            client.create(waiter, instance_id)
        wait_all(url, waiter, waits, status="waiting", timeout=120)
        resumed = []
        for instance_id in waits:
            sent = client.send_event(waiter, instance_id, "go")
            output = wait_all(url, waiter, [instance_id], status="complete", timeout=60, interval=0.002)
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
            "cpu_ms_per_instance": proc_cpu.difference_ms_per(cpu_before, cpu_after, args.instances),
            "machine_cpu_ms_per_instance": round(burst_cpu * 1000 / args.instances, 2),
            "postgres_commits_per_instance": round(commits / args.instances, 2),
            "create_to_first_effect_unloaded": summary_ms(unloaded),
            "one_step_create_to_complete": summary_ms(one_step),
            "one_step_create_to_terminal_at": summary_ms(one_step_stamped),
            "create_to_first_effect_burst": summary_ms(burst),
            "send_event_to_wait_resumed": summary_ms(resumed),
            "load_average": os.getloadavg(),
        }
    finally:
        scratch.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=200, help="instances in the burst (default 200)")
    parser.add_argument("--workers", type=int, default=1, help="takohost worker commands (default 1)")
    parser.add_argument(
        "--pool",
        choices=("solo", "prefork"),
        default="solo",
        help="--pool of each worker (default solo: N solo processes under one supervisor)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=2, help="--concurrency of each worker (default 2: one per core)"
    )
    parser.add_argument(
        "--create-threads", type=int, default=4, help="threads creating the burst (default 4)"
    )
    parser.add_argument("--latency-samples", type=int, default=100, help="samples per latency (default 100)")
    parser.add_argument("--api-workers", type=int, default=1, help="gunicorn worker processes (default 1)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
