"""Benchmark the resource API: create and GET at a fixed concurrency (docs/spec/host-features.md#hf-foundation).

Not a timed test: it prints one JSON line per operation kind,
``{"op", "n", "p50_ms", "p99_ms", "rps"}``, and exits 0 unless requests failed.

    python -m bench.api_bench --url http://127.0.0.1:8080 --token TOKEN --space SPACE
    python -m bench.api_bench --self-host        # scratch database + its own API and worker

``create`` is ``POST /v2/spaces/{space}/resources`` of a ModuleWorker (a fresh name and
Idempotency-Key each; the answer is the ``202`` Operation, so it measures acceptance, not the
reconcile); ``get`` is ``GET /v2/spaces/{space}/resources/{uid}`` of the created resources;
``get_operation`` is ``GET …/operations/{id}``. ``--self-host`` needs the local Postgres
(``TAKOHOST_TEST_PG``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``) and Redis.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import requests

log = logging.getLogger("bench")

MODULE_WORKER = "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/"


def _session_factory() -> Callable[[], requests.Session]:
    local = threading.local()

    def get() -> requests.Session:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return local.session

    return get


def run_phase(
    name: str, calls: list[Callable[[requests.Session], object]], *, concurrency: int
) -> tuple[dict, list[object]]:
    """Run ``calls`` on ``concurrency`` threads; returns the summary line and the call results."""
    session = _session_factory()
    latencies: list[float] = []
    lock = threading.Lock()

    def timed(call: Callable[[requests.Session], object]) -> object:
        start = time.perf_counter()
        result = call(session())
        elapsed = (time.perf_counter() - start) * 1000
        with lock:
            latencies.append(elapsed)
        return result

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(timed, calls))
    wall = time.perf_counter() - started
    latencies.sort()
    summary = {
        "op": name,
        "n": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "rps": round(len(latencies) / wall, 1),
    }
    return summary, results


def bench(*, url: str, token: str, space: str, n: int, concurrency: int) -> list[dict]:
    """Create ``n`` ModuleWorkers, then GET each and its Operation; returns the summary lines."""
    auth = {"Authorization": f"Bearer {token}"}
    run = uuid.uuid4().hex[:6]

    def create(i: int) -> Callable[[requests.Session], object]:
        def call(s: requests.Session) -> object:
            body = {"form": MODULE_WORKER, "name": f"bench-{run}-{i}", "spec": {}}
            response = s.post(
                f"{url}/v2/spaces/{space}/resources",
                json=body,
                headers={**auth, "Idempotency-Key": f"bench-{run}-{i}"},
                timeout=60,
            )
            if response.status_code != 202:
                raise RuntimeError(f"create answered {response.status_code}: {response.text[:200]}")
            return response.json()

        return call

    lines = []
    summary, ops = run_phase("create", [create(i) for i in range(n)], concurrency=concurrency)
    lines.append(summary)

    def get(path: str) -> Callable[[requests.Session], object]:
        def call(s: requests.Session) -> object:
            response = s.get(url + path, headers=auth, timeout=60)
            if response.status_code != 200:
                raise RuntimeError(f"GET {path} answered {response.status_code}")
            return None

        return call

    summary, _ = run_phase(
        "get",
        [get(f"/v2/spaces/{space}/resources/{op['resourceUid']}") for op in ops],
        concurrency=concurrency,
    )
    lines.append(summary)
    summary, _ = run_phase(
        "get_operation",
        [get(f"/v2/spaces/{space}/operations/{op['id']}") for op in ops],
        concurrency=concurrency,
    )
    lines.append(summary)
    return lines


@contextlib.contextmanager
def self_hosted() -> Iterator[tuple[str, str, str]]:
    """A scratch database with migrations, a token, and a running API + worker: ``(url, token, space)``."""
    import socket

    import sqlalchemy as sa

    admin_url = os.environ.get("TAKOHOST_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    name = f"takohost_bench_{uuid.uuid4().hex[:8]}"
    db_url = admin_url.rsplit("/", 1)[0] + "/" + name
    namespace = f"tkb{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "TAKOHOST_DATABASE_URL": db_url, "TAKOHOST_NAMESPACE": namespace}
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    processes: list[subprocess.Popen] = []
    try:
        subprocess.run(
            [sys.executable, "-m", "host_cli", "db", "upgrade"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        space = "bench"
        token = (
            subprocess.run(
                [sys.executable, "-m", "host_cli", "token", "create", "--space", space],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        logs = tempfile.mkdtemp(prefix="takohost-bench-")
        for args in (["api", f"--port={port}", "--workers=2"], ["worker", "--concurrency=2"]):
            out = open(os.path.join(logs, f"{args[0]}.log"), "w")  # noqa: SIM115 - kept open for the child
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "host_cli", *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not become healthy; logs in {logs}")
            time.sleep(0.2)
        log.info("self-hosted API at %s (logs in %s)", url, logs)
        yield url, token, space
    finally:
        for proc in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        _drop_namespace(namespace)


def _drop_namespace(namespace: str) -> None:
    """Delete this run's Redis keys (only keys of its own namespace)."""
    import redis

    client = redis.Redis.from_url(os.environ.get("TAKOHOST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    keys = list(client.scan_iter(match=f"{namespace}:*", count=500))
    if keys:
        client.delete(*keys)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints one JSON line per operation kind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="base URL of a running API, e.g. http://127.0.0.1:8080")
    parser.add_argument("--token", help="a bearer token of --space")
    parser.add_argument("--space", help="the Space to create resources in")
    parser.add_argument("--self-host", action="store_true", help="start a scratch API + worker and use them")
    parser.add_argument("-n", "--count", type=int, default=400, help="requests per operation kind")
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    if args.self_host:
        with self_hosted() as (url, token, space):
            lines = bench(url=url, token=token, space=space, n=args.count, concurrency=args.concurrency)
    else:
        if not (args.url and args.token and args.space):
            parser.error("--url, --token and --space are required without --self-host")
        lines = bench(
            url=args.url.rstrip("/"),
            token=args.token,
            space=args.space,
            n=args.count,
            concurrency=args.concurrency,
        )
    for line in lines:
        sys.stdout.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
