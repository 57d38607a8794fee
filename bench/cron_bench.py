"""Cron benchmark: N triggers on one cron expression, real beat and workers, for M minutes.

Usage::

    .venv/bin/python bench/cron_bench.py [--triggers 2000] [--minutes 3] [--cron '* * * * *']
                                         [--workers 1] [--concurrency 2] [--beats 1]

Creates a scratch database on the local Postgres (``TAKOHOST_TEST_PG`` admin URL, default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``) and a private Redis namespace, writes
one Worker/Version/Deployment and ``--triggers`` WorkerCronTriggers straight into it (schedules
registered with ``register_schedule_txn``), starts ``takohost beat`` and ``takohost worker``
processes on it, waits ``--minutes`` whole minutes plus a drain period, and prints JSON: per
scheduled minute, matches recorded, p50/p99 lateness of recording and of the first delivery's
start versus scheduledTime (milliseconds), deliveries beyond one per match, and duplicate
matches (must be 0). Everything it created is removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from models import cron as cron_models  # noqa: E402
from models import db as models_db  # noqa: E402
from models import migrate  # noqa: E402
from models import resources as res_models  # noqa: E402
from services import cron_schedules, tokens  # noqa: E402

HANDLER = "def scheduled(event, env, ctx):\n    return None\n"
ADMIN_URL = os.environ.get("TAKOHOST_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _admin() -> sa.Engine:
    return sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 1)


def _populate(url: str, *, count: int, expression: str, now: dt.datetime) -> list[str]:
    space = f"bench{uuid.uuid4().hex[:6]}"
    with models_db.session_scope(url) as session:
        tokens.create_token_txn(session, space=space)
    worker, version, deployment = (str(uuid.uuid4()) for _ in range(3))
    common = {
        "space": space,
        "observed_at": now,
        "output": {},
        "phase": "idle",
        "created_at": now,
        "updated_at": now,
    }
    with models_db.session_scope(url) as session:
        session.add(
            res_models.Resource(
                uid=worker, form="ModuleWorker", name="bench-worker", spec={}, observed={}, **common
            )
        )
        session.add(
            res_models.Resource(
                uid=version,
                form="WorkerVersion",
                name="bench-version",
                worker_uid=worker,
                spec={
                    "worker": {"resourceUid": worker},
                    "mainModule": "main.py",
                    "modules": {"main.py": HANDLER},
                    "vars": {},
                    "workflowBindings": [],
                },
                observed={"validated": True, "workflowClasses": [], "handlers": ["scheduled"]},
                **common,
            )
        )
        session.add(
            res_models.Resource(
                uid=deployment,
                form="WorkerDeployment",
                name="bench-deployment",
                worker_uid=worker,
                spec={
                    "worker": {"resourceUid": worker},
                    "versions": [{"version": {"resourceUid": version}, "weight": 100}],
                },
                observed={},
                **common,
            )
        )
        uids = []
        for i in range(count):
            uid = str(uuid.uuid4())
            trigger = res_models.Resource(
                uid=uid,
                form="WorkerCronTrigger",
                name=f"bench-trigger-{i}",
                worker_uid=worker,
                spec={"worker": {"resourceUid": worker}, "cron": expression},
                observed={},
                **common,
            )
            session.add(trigger)
            session.flush()
            trigger.observed = cron_schedules.register_schedule_txn(session, trigger=trigger, now=now)
            uids.append(uid)
    return uids


def _start(args: list[str], env: dict[str, str], log_dir: str, name: str) -> subprocess.Popen:
    log = open(os.path.join(log_dir, f"{name}.log"), "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "host_cli", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
        cwd=ROOT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _report(url: str, *, start: dt.datetime, minutes: int, triggers: int) -> dict:
    with models_db.session_scope(url) as session:
        rows = session.execute(
            sa.select(
                cron_models.CronMatch.pk,
                cron_models.CronMatch.scheduled_time,
                cron_models.CronMatch.recorded_at,
                sa.func.min(cron_models.CronDelivery.started_at),
                sa.func.count(cron_models.CronDelivery.pk),
                sa.func.count(cron_models.CronDelivery.pk).filter(cron_models.CronDelivery.outcome == "ok"),
            )
            .outerjoin(
                cron_models.CronDelivery, cron_models.CronDelivery.match_pk == cron_models.CronMatch.pk
            )
            .group_by(cron_models.CronMatch.pk)
        ).all()
        duplicates = session.scalar(
            sa.select(sa.func.count()).select_from(
                sa.select(cron_models.CronMatch.trigger_uid)
                .group_by(cron_models.CronMatch.trigger_uid, cron_models.CronMatch.scheduled_time)
                .having(sa.func.count() > 1)
                .subquery()
            )
        )
        skipped = session.scalar(sa.select(sa.func.count()).select_from(cron_models.CronSkip))
    per_minute: dict[dt.datetime, dict] = {}
    for _, scheduled, recorded, first_start, deliveries, ok in rows:
        entry = per_minute.setdefault(scheduled, {"record": [], "deliver": [], "extra": 0, "undelivered": 0})
        entry["record"].append((recorded - scheduled).total_seconds() * 1000)
        if first_start is None or not ok:
            entry["undelivered"] += 1
        if first_start is not None:
            entry["deliver"].append((first_start - scheduled).total_seconds() * 1000)
        entry["extra"] += max(0, deliveries - 1)
    minutes_out = []
    for scheduled in sorted(per_minute):
        entry = per_minute[scheduled]
        minutes_out.append(
            {
                "scheduledTime": scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "matchesRecorded": len(entry["record"]),
                "recordLatenessMs": {
                    "p50": _percentile(entry["record"], 0.5),
                    "p99": _percentile(entry["record"], 0.99),
                    "max": _percentile(entry["record"], 1.0),
                },
                "deliveryStartLatenessMs": {
                    "p50": _percentile(entry["deliver"], 0.5),
                    "p99": _percentile(entry["deliver"], 0.99),
                    "max": _percentile(entry["deliver"], 1.0),
                },
                "redeliveries": entry["extra"],
                "undelivered": entry["undelivered"],
            }
        )
    all_record = [v for e in per_minute.values() for v in e["record"]]
    all_deliver = [v for e in per_minute.values() for v in e["deliver"]]
    return {
        "triggers": triggers,
        "minutes": minutes,
        "startedAt": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "perMinute": minutes_out,
        "totals": {
            "matchesRecorded": len(rows),
            "duplicateMatches": duplicates,
            "skipped": skipped,
            "recordLatenessMs": {"p50": _percentile(all_record, 0.5), "p99": _percentile(all_record, 0.99)},
            "deliveryStartLatenessMs": {
                "p50": _percentile(all_deliver, 0.5),
                "p99": _percentile(all_deliver, 0.99),
            },
            "meanRecordLatenessMs": round(statistics.fmean(all_record), 1) if all_record else None,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the JSON report on stdout, progress on stderr."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=2000)
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--cron", default="* * * * *")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="pool size of each worker")
    parser.add_argument("--beats", type=int, default=1, help="beat processes (more than one is harmless)")
    parser.add_argument(
        "--drain", type=float, default=180.0, help="seconds to wait for deliveries after the end"
    )
    options = parser.parse_args(argv)

    run = uuid.uuid4().hex[:8]
    name = f"takohost_cronbench_{run}"
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    env = {"TAKOHOST_DATABASE_URL": url, "TAKOHOST_NAMESPACE": f"tkb{run}"}
    log_dir = tempfile.mkdtemp(prefix="takohost-cronbench-")
    with _admin().connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    started: list[subprocess.Popen] = []
    try:
        migrate.upgrade(url)
        # Start processes first, then create the triggers, so the first measured minute is warm.
        for i in range(options.workers):
            started.append(
                _start(
                    ["worker", f"--concurrency={options.concurrency}", "--loglevel=WARNING"],
                    env,
                    log_dir,
                    f"worker{i}",
                )
            )
        for i in range(options.beats):
            started.append(_start(["beat", "--loglevel=INFO"], env, log_dir, f"beat{i}"))
        time.sleep(8)
        now = dt.datetime.now(dt.UTC)
        t0 = time.monotonic()
        _populate(url, count=options.triggers, expression=options.cron, now=now)
        print(
            f"created {options.triggers} triggers in {time.monotonic() - t0:.1f} s; logs in {log_dir}",
            file=sys.stderr,
        )
        # The first minute that starts after every trigger exists (creating 10,000 can take longer
        # than a minute on a loaded machine: matches of earlier minutes are reported, not measured).
        created = dt.datetime.now(dt.UTC)
        first = created.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        end = first + dt.timedelta(minutes=options.minutes - 1, seconds=30)  # the last minute fully recorded
        while (remaining := (end - dt.datetime.now(dt.UTC)).total_seconds()) > 0:
            print(f"measuring: {remaining:.0f} s left", file=sys.stderr)
            time.sleep(min(30.0, remaining))
        # Stop recording new matches; let the workers drain what was recorded.
        for process in started[options.workers :]:
            _stop(process)
        deadline = time.monotonic() + options.drain
        while time.monotonic() < deadline:
            with models_db.session_scope(url) as session:
                pending = session.scalar(
                    sa.select(sa.func.count()).where(cron_models.CronMatch.state == "pending")
                )
            if not pending:
                break
            time.sleep(1)
        report = _report(url, start=first, minutes=options.minutes, triggers=options.triggers)
        report["logs"] = log_dir
        print(json.dumps(report, indent=2))
        return 0 if report["totals"]["duplicateMatches"] == 0 else 1
    finally:
        for process in started:
            _stop(process)
        models_db.dispose_all()
        import redis

        client = redis.Redis.from_url(os.environ.get("TAKOHOST_REDIS_URL", "redis://127.0.0.1:6379/0"))
        for key in client.scan_iter(match=f"{env['TAKOHOST_NAMESPACE']}:*"):
            client.delete(key)
        with _admin().connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    sys.exit(main())
