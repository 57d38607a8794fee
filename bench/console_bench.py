"""Benchmark the web console's page loads with 10,000 instances in one workflow (docs/spec/host-features.md#hf-console).

Not a timed test: it prints one JSON line per page, ``{"page", "n", "api_cpu_ms", "p50_ms",
"p95_ms", "max_ms", "bytes"}`` — the wall time of a full ``GET`` (request sent to last byte read)
against a real ``takohost api`` (gunicorn, 2 workers), and the API processes' CPU time per load
(user + system, from ``/proc``: what a page costs the API whatever else runs on the machine;
Postgres's share is not in it) — and a last line ``{"instances", "budget_ms",
"p95_under_budget"}``. Exits 1 when a page's p95 is over the budget.

    python -m bench.console_bench                       # 10,000 instances, 30 loads per page
    python -m bench.console_bench --instances 50000 --loads 50 --history 2000

It makes a scratch database on ``TAKOHOST_TEST_DATABASE_URL`` (an admin URL; default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), migrates it, inserts one
DurableWorkflow with ``--instances`` instances spread over the seven statuses (one of them with
a 60-event history (``--history``), 20 steps, 5 inbox events and 300 log lines), a
WorkerCronTrigger with a ``--runs`` ledger (deliveries, failures, skips, started instances; the
newest run with 100 log lines) and a Space token, starts the API, signs in to the console and
loads each page (lists: first and second page, one, several and a time range of statuses, id
prefixes; the instance, its logs, go-to; Operations; cron triggers, one trigger, one run); then
drops the database. Only the API runs: the pages read, they
start no work (the instance-count deltas the inserts appended are folded first, as the beat's
sweep does on a live host).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import requests
import sqlalchemy as sa

from bench import scratch

BUDGET_MS = 50.0
#: Runs in the cron trigger's ledger (one every five minutes back from now).
RUNS = 2000
#: Log lines of the cron trigger's newest run.
RUN_LOG_LINES = 100
#: Log lines of the detailed instance.
LOG_LINES = 300
STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")


@dataclasses.dataclass
class Populated:
    """What :func:`_populate` made: the Space token, the workflow, the detailed instance, the
    cron trigger and the scheduled time of its newest run (as the ledger writes it), and when the
    instances were created (``first``..``last``)."""

    token: str
    workflow: str
    detailed: str
    trigger: str
    run_time: str
    first: dt.datetime
    last: dt.datetime


def _populate(url: str, *, n: int, history: int = 60, runs: int = RUNS) -> Populated:
    """Migrate ``url`` and fill it (instances, the detailed one, a cron trigger and its ledger)."""
    from models import db as models_db
    from models import instances as inst_models
    from models import migrate, tenant_logs
    from models import resources as res_models
    from services import tokens

    migrate.upgrade(url)
    now = dt.datetime.now(dt.UTC)
    space = "bench"
    with models_db.session_scope(url) as session:
        token = tokens.create_token_txn(session, space=space)
    worker, workflow = str(uuid.uuid4()), str(uuid.uuid4())
    with models_db.session_scope(url) as session:
        for uid, form, name, spec in (
            (worker, "ModuleWorker", "bench-worker", {}),
            (workflow, "DurableWorkflow", "bench-orders", {"worker": {"resourceUid": worker}, "className": "F"}),
        ):
            session.add(
                res_models.Resource(
                    uid=uid, space=space, form=form, name=name, generation=1, spec=spec, observed={},
                    output={}, phase="idle", worker_uid=worker if form != "ModuleWorker" else None,
                    created_at=now, updated_at=now,
                )
            )
    rows = []
    for i in range(n):
        created = now - dt.timedelta(seconds=n - i)
        status = STATUSES[i % len(STATUSES)]
        rows.append(
            {
                "workflow_uid": workflow, "space": space, "instance_id": f"order-{i:06d}", "status": status,
                "epoch": 1, "params": {"orderId": i, "items": [{"sku": "TEA-01", "qty": 2}]},
                "output": {"ok": True} if status == "complete" else None,
                "error": {"reason": "run_threw", "message": "ValueError: x"} if status == "errored" else None,
                "created_at": created, "updated_at": created, "lifetime_ends_at": created + dt.timedelta(days=365),
                "step_count": 0, "next_event_id": 1, "next_sequence": 1, "inbox_count": 0, "inbox_bytes": 0,
            }
        )
    with models_db.session_scope(url) as session:
        for start in range(0, n, 5000):
            session.execute(sa.insert(inst_models.Instance), rows[start : start + 5000])
    detailed = f"order-{n - 1:06d}"
    with models_db.session_scope(url) as session:
        instance = session.scalar(
            sa.select(inst_models.Instance).where(
                inst_models.Instance.workflow_uid == workflow, inst_models.Instance.instance_id == detailed
            )
        )
        instance.status, t = "waiting", instance.created_at
        events = [("InstanceCreated", {"instanceId": detailed}), ("ContextStarted", {"versionUid": worker, "epoch": 1})]
        for s in range(20):
            name = f"step {s}"
            session.add(inst_models.Step(instance_pk=instance.pk, name=name, kind="do", state="succeeded",
                                         attempts=1, result={"n": s}, created_at=t, updated_at=t))
            events += [("StepAttemptStarted", {"name": name, "attempt": 1}),
                       ("StepCompleted", {"name": name, "kind": "do", "attempt": 1})]
        events += [("WaitStarted", {"name": "approval", "type": "approved", "timeoutAt": "2030-01-01T00:00:00Z"}),
                   ("ContextSuspended", {"status": "waiting", "reason": "wait"})]
        while len(events) < history:
            events.append(("EventAccepted", {"sequence": len(events), "type": "note"}))
        for k, (kind, attrs) in enumerate(events, start=1):
            session.add(inst_models.HistoryEvent(instance_pk=instance.pk, event_id=k, event_type=kind,
                                                 attributes=attrs, event_timestamp=t + dt.timedelta(milliseconds=50 * k)))
        for q in range(5):
            session.add(inst_models.InboxEvent(instance_pk=instance.pk, sequence=q + 1, type="note",
                                               payload={"q": q}, canonical_bytes=20, accepted_at=t))
        instance.next_event_id, instance.step_count, instance.inbox_count = len(events) + 1, 20, 5
        for q in range(LOG_LINES):
            session.add(tenant_logs.TenantLog(instance_pk=instance.pk, seq=q + 1, epoch=1, step=f"step {q % 20}",
                                              attempt=1, stream="stdout", message=f"line {q}: did a thing",
                                              logged_at=t))
    trigger, run_time = _populate_cron(url, space=space, worker=worker, workflow=workflow, n=n, runs=runs, now=now)
    return Populated(token=token, workflow=workflow, detailed=detailed, trigger=trigger, run_time=run_time,
                     first=now - dt.timedelta(seconds=n), last=now - dt.timedelta(seconds=1))


def _populate_cron(
    url: str, *, space: str, worker: str, workflow: str, n: int, runs: int, now: dt.datetime
) -> tuple[str, str]:
    """A WorkerCronTrigger (``*/5 * * * *``) with ``runs`` matches in its ledger, one every five
    minutes back from ``now``: each with a delivery (every seventh failed, then retried) that
    started an instance, every tenth a skipped match instead; the newest run has
    :data:`RUN_LOG_LINES` log lines. Returns ``(trigger uid, the newest run's scheduledTime)``."""
    from models import cron as cron_models
    from models import db as models_db
    from models import resources as res_models
    from models import tenant_logs

    trigger = str(uuid.uuid4())
    newest = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5)
    with models_db.session_scope(url) as session:
        session.add(res_models.Resource(
            uid=trigger, space=space, form="WorkerCronTrigger", name="bench-every-5-min", generation=1,
            spec={"worker": {"resourceUid": worker}, "cron": "*/5 * * * *"}, observed={}, output={},
            phase="idle", worker_uid=worker, created_at=now, updated_at=now,
        ))
    matches, skips = [], []
    for k in range(runs):
        at = newest - dt.timedelta(minutes=5 * k)
        if k % 10 == 9:
            skips.append({"trigger_uid": trigger, "cron": "*/5 * * * *", "scheduled_time": at,
                          "reason": "no beat was running", "recorded_at": at + dt.timedelta(minutes=30)})
        else:
            matches.append({"trigger_uid": trigger, "space": space, "worker_uid": worker, "cron": "*/5 * * * *",
                            "scheduled_time": at, "recorded_at": at + dt.timedelta(milliseconds=40),
                            "dispatched_at": at + dt.timedelta(milliseconds=60), "state": "done"})
    with models_db.session_scope(url) as session:
        if skips:
            session.execute(sa.insert(cron_models.CronSkip), skips)
        match_pks = session.scalars(
            sa.insert(cron_models.CronMatch).returning(cron_models.CronMatch.pk, sort_by_parameter_order=True),
            matches,
        ).all() if matches else []
    deliveries = []
    for pk, m in zip(match_pks, matches, strict=True):
        start = m["scheduled_time"] + dt.timedelta(milliseconds=80)
        if pk % 7 == 0:
            deliveries.append({"match_pk": pk, "worker_id": "w1:1", "version_uid": worker, "started_at": start,
                               "finished_at": start + dt.timedelta(seconds=1), "outcome": "failed",
                               "error": "RuntimeError: the report store said 503"})
            start += dt.timedelta(seconds=30)
        deliveries.append({"match_pk": pk, "worker_id": "w1:1", "version_uid": worker, "started_at": start,
                           "finished_at": start + dt.timedelta(seconds=2), "outcome": "ok", "error": None})
    with models_db.session_scope(url) as session:
        delivery_pks = session.scalars(
            sa.insert(cron_models.CronDelivery).returning(cron_models.CronDelivery.pk, sort_by_parameter_order=True),
            deliveries,
        ).all() if deliveries else []
        started = [
            {"delivery_pk": pk, "workflow_uid": workflow, "instance_id": f"order-{(n - 1 - i) % n:06d}",
             "created_at": d["started_at"]}
            for i, (pk, d) in enumerate(zip(delivery_pks, deliveries, strict=True)) if d["outcome"] == "ok"
        ]
        for start in range(0, len(started), 5000):
            session.execute(sa.insert(cron_models.CronRunInstance), started[start : start + 5000])
        if delivery_pks:
            first = delivery_pks[0]  # the newest run's (first) delivery
            session.execute(sa.insert(tenant_logs.TenantLog), [
                {"delivery_pk": first, "seq": q + 1, "epoch": None, "stream": "stdout",
                 "message": f"report line {q}", "logged_at": deliveries[0]["started_at"]}
                for q in range(RUN_LOG_LINES)
            ])
    newest_run = matches[0]["scheduled_time"] if matches else newest
    return trigger, newest_run.strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def _api(db_url: str):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TAKOHOST_DATABASE_URL": db_url, "TAKOHOST_NAMESPACE": f"tkc{uuid.uuid4().hex[:8]}"}
    log = tempfile.NamedTemporaryFile(prefix="takohost-console-bench-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "host_cli", "api", f"--port={port}", "--workers=2"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the API did not start; see {log.name}")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)


def _cpu_seconds(group: int) -> float:
    """User + system CPU seconds of every process in process group ``group`` (the API's
    gunicorn master and workers), from ``/proc``."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _measure(session: requests.Session, url: str, *, loads: int, group: int, expect: int = 200) -> dict:
    for _ in range(3):  # warm the connection pools and Jinja's template cache
        session.get(url, timeout=30)
    cpu = _cpu_seconds(group)
    times, size = [], 0
    for _ in range(loads):
        start = time.perf_counter()
        response = session.get(url, timeout=30)
        body = response.content
        times.append((time.perf_counter() - start) * 1000)
        if response.status_code != expect:
            raise RuntimeError(f"GET {url} answered {response.status_code}: {body[:300]!r}")
        size = len(body)
    cpu = _cpu_seconds(group) - cpu
    times.sort()
    return {
        "n": loads,
        "api_cpu_ms": round(cpu / loads * 1000, 1),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[min(len(times) - 1, int(len(times) * 0.95))], 1),
        "max_ms": round(times[-1], 1),
        "bytes": size,
    }


def _minute(at: dt.datetime) -> str:
    """``at`` as a ``datetime-local`` field sends it (UTC, to the minute): the time-range filter's
    ``from``/``to``."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the JSON lines; 1 when a p95 is over the budget."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=30)
    parser.add_argument("--history", type=int, default=60, help="history events of the detailed instance")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in the cron trigger's ledger")
    args = parser.parse_args(argv)
    over = False
    with scratch.scratch_database("takohost_console_bench") as db_url:
        made = _populate(db_url, n=args.instances, history=args.history, runs=args.runs)
        token, workflow, detailed = made.token, made.workflow, made.detailed
        from models import db as models_db
        from models import status_counts

        # What the beat's sweep does every few seconds on a live host: fold the count deltas the
        # inserts appended (only the API runs here).
        status_counts.compact(database_url=db_url, max_batches=1000)
        with models_db.session_scope(db_url) as session:
            session.execute(sa.text("ANALYZE"))
        models_db.dispose_all()
        with _api(db_url) as (base, group):
            session = requests.Session()
            signed = session.post(f"{base}/ui/sign-in", data={"token": token}, allow_redirects=False)
            assert signed.status_code == 303, signed.text
            span = made.last - made.first
            middle = made.first + span / 2
            first = session.get(f"{base}/ui/workflows/{workflow}").text
            page2 = re.search(r'rel="next" href="[^"]*page=([^&"]+)', first).group(1)
            pages = {
                "workflows": f"{base}/ui/workflows",
                "instances": f"{base}/ui/workflows/{workflow}",
                "instances_page2": f"{base}/ui/workflows/{workflow}?page={page2}",
                "instances_status_errored": f"{base}/ui/workflows/{workflow}?status=errored",
                "instances_prefix": f"{base}/ui/workflows/{workflow}?prefix=order-0042",
                "instances_prefix_no_match": f"{base}/ui/workflows/{workflow}?prefix=zzz",
                "instance": f"{base}/ui/workflows/{workflow}/instance?id={detailed}",
                "instance_logs": f"{base}/ui/workflows/{workflow}/instance/logs?id={detailed}",
                "go_to_instance": f"{base}/ui/go?id={detailed}",
                "instances_multi_status": f"{base}/ui/workflows/{workflow}?status=errored&status=terminated"
                                          "&status=waiting",
                "instances_time_range": f"{base}/ui/workflows/{workflow}?from={_minute(middle)}"
                                        f"&to={_minute(middle + span / 4)}",
                "operations": f"{base}/ui/operations",
                "triggers": f"{base}/ui/triggers",
                "trigger": f"{base}/ui/triggers/{made.trigger}",
                "trigger_run": f"{base}/ui/triggers/{made.trigger}/run?t={made.run_time}",
            }
            for page, url in pages.items():
                line = {"page": page, **_measure(session, url, loads=args.loads, group=group)}
                over = over or line["p95_ms"] > BUDGET_MS
                print(json.dumps(line), flush=True)
            print(json.dumps({"instances": args.instances, "budget_ms": BUDGET_MS, "p95_under_budget": not over}))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
