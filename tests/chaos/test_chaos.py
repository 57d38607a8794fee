"""Chaos (docs/spec/house-rules.md#hr-tests "chaos/ (SIGKILL and restarts)"; docs/spec/host-features.md#hf-stop): 200 instances with sleeps,
events and retries run on 2–3 real workers that are SIGKILLed and restarted at random (seeded)
intervals, with a real beat and API. At the end:

* every instance is terminal with the right output;
* no step ran its effect after its result was committed (each effect appends ``name start-time``
  to its instance's file; every line of a step is older than the step's ``StepCompleted``);
* each instance's history is gapless (eventIds 1..n) and newest-last in time.

Effects may run twice (docs/spec/durable-workflow.md: "効果の実行後、結果commit前にHostが死ぬと効果は重複し得る"), never
after their result is committed. Bounded: the kills stop after ``CHAOS_SECONDS`` (with fewer than
``MIN_KILLS`` by then, at ``MIN_KILLS`` or ``3 * CHAOS_SECONDS``); everything must be finished
``SETTLE_SECONDS`` later. ``TAKOHOST_CHAOS_SEED`` picks another seed. Lease TTL 3 s
(a normal setting): a killed worker's instances are taken over a few seconds later.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import os
import random
import signal
import time

import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from tests.support import processes, workflows

INSTANCES = 200
WORKERS = 3
CONCURRENCY = 2
POOL = "solo"  # the default: CONCURRENCY solo processes under one supervisor
CHAOS_SECONDS = 45.0
#: Fewer kills than this by ``CHAOS_SECONDS`` (a loaded machine, slow restarts) extends the kills
#: up to ``3 * CHAOS_SECONDS``: the test must not pass, nor fail, for want of chaos.
MIN_KILLS = 5
SETTLE_SECONDS = 120.0
SEED = int(os.environ.get("TAKOHOST_CHAOS_SEED", "20261130"))

log = logging.getLogger(__name__)

CHAOS = """
import os, time
class Chaos:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect(name, failures=0):
            def run_it():
                with open(p["log"], "a") as f:
                    f.write(f"{name} {time.time()!r}\\n")
                if p["pause"]:
                    time.sleep(p["pause"])
                if failures:
                    with open(p["log"]) as f:
                        tries = sum(1 for line in f if line.split()[0] == name)
                    if tries <= failures:
                        raise RuntimeError(f"{name} fails its first {failures} attempt(s)")
                return {"step": name}
            return run_it
        a = step.do("a", effect("a"))
        step.sleep("nap", p["sleep"])
        b = step.do("b", effect("b", failures=1), {"maxAttempts": 3, "initialDelaySeconds": 1})
        got = step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
        c = step.do("c", effect("c"))
        return {"a": a, "b": b, "got": got, "c": c, "id": event["instanceId"]}
"""


def _log_lines(path: str) -> list[tuple[str, float]]:
    try:
        with open(path) as f:
            return [(name, float(at)) for name, at in (line.split() for line in f if line.strip())]
    except FileNotFoundError:
        return []


def _finished(db_url: str, workflow: str) -> int:
    with models_db.session_scope(db_url) as session:
        return session.scalar(
            sa.select(sa.func.count())
            .select_from(inst_models.Instance)
            .where(
                inst_models.Instance.workflow_uid == workflow,
                inst_models.Instance.status.in_(inst_models.TERMINAL_STATUSES),
            )
        )


def _kill(process) -> None:
    process.kill(signal.SIGKILL)
    process.proc.wait(10)


def test_chaos_sigkilled_workers_lose_nothing_and_repeat_no_committed_effect(tmp_path):
    rng = random.Random(SEED)
    with workflows.private_stack(
        workers=WORKERS, worker_pool=POOL, worker_concurrency=CONCURRENCY, lease_ttl_ms=3000
    ) as stack:
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=CHAOS, class_name="Chaos")
        http = stack.instances(deployed.workflow)
        ids = [f"chaos/{i:03d}" for i in range(INSTANCES)]
        logs = {instance_id: str(tmp_path / f"{i:03d}.log") for i, instance_id in enumerate(ids)}
        # events go out at random moments: some before the wait starts (queued), most while waiting
        event_offsets = sorted((rng.uniform(2.0, CHAOS_SECONDS * 0.8), i) for i in range(INSTANCES))
        first_kill = rng.uniform(1.0, 3.0)
        for instance_id in ids:
            params = {
                "log": logs[instance_id],
                "sleep": rng.choice([0, 1, 2, 3]),
                "pause": rng.choice([0.0, 0.1, 0.3]),
            }
            code, body = http.call("POST", body={"id": instance_id, "params": params})
            assert code == 201, body
        # The chaos clock starts once every instance is created: on a loaded machine the creates
        # alone took most of CHAOS_SECONDS, which left no time for kills.
        started = time.monotonic()
        event_due = [(started + offset, i) for offset, i in event_offsets]
        next_kill = started + first_kill
        kills = 0
        workers = [p for p in stack.processes if p.name == "worker"]
        def killing(now: float) -> bool:
            elapsed = now - started
            return elapsed < CHAOS_SECONDS or (kills < MIN_KILLS and elapsed < 3 * CHAOS_SECONDS)

        while killing(time.monotonic()) or event_due:
            now = time.monotonic()
            while event_due and event_due[0][0] <= now:
                _, i = event_due.pop(0)
                code, body = http.call(
                    "POST", "/" + http.enc(ids[i]) + "/events", body={"type": "go", "payload": {"n": i}}
                )
                assert code == 202, body
            if now >= next_kill and killing(now):
                # The victim is a ready worker (one still starting has nothing to lose); restarts
                # are not waited for, so the kills keep their pace however slow a start is
                # (waiting for each left fewer than 5 kills in the window on a loaded machine).
                ready = [p for p in workers if processes.is_ready(p)]
                if ready:
                    alive = [p for p in workers if p.alive()]
                    victim = rng.choice(ready)
                    _kill(victim)
                    kills += 1
                    if len(alive) - 1 < 2 or rng.random() < 0.7:  # keep 2-3 workers, restart most victims
                        workers.append(stack.start_worker(concurrency=CONCURRENCY, pool=POOL, wait=False))
                    next_kill = time.monotonic() + rng.uniform(1.5, 4.0)
            time.sleep(0.05)
        while len([p for p in workers if p.alive()]) < 2:
            workers.append(stack.start_worker(concurrency=CONCURRENCY, pool=POOL))
        assert kills >= MIN_KILLS
        workflows.wait_until(
            lambda: _finished(stack.db_url, deployed.workflow) == INSTANCES,
            timeout=SETTLE_SECONDS,
            interval=0.5,
            message="every instance terminal",
        )

        with models_db.session_scope(stack.db_url) as session:
            rows = session.execute(
                sa.select(
                    inst_models.Instance.pk,
                    inst_models.Instance.instance_id,
                    inst_models.Instance.status,
                    inst_models.Instance.output,
                    inst_models.Instance.error,
                ).where(inst_models.Instance.workflow_uid == deployed.workflow)
            ).all()
            history = collections.defaultdict(list)
            for pk, event_id, event_type, attributes, at in session.execute(
                sa.select(
                    inst_models.HistoryEvent.instance_pk,
                    inst_models.HistoryEvent.event_id,
                    inst_models.HistoryEvent.event_type,
                    inst_models.HistoryEvent.attributes,
                    inst_models.HistoryEvent.event_timestamp,
                )
                .join(inst_models.Instance, inst_models.Instance.pk == inst_models.HistoryEvent.instance_pk)
                .where(inst_models.Instance.workflow_uid == deployed.workflow)
                .order_by(inst_models.HistoryEvent.instance_pk, inst_models.HistoryEvent.event_id)
            ):
                history[pk].append((event_id, event_type, attributes, at))

    problems = []
    retried = duplicated = 0
    for pk, instance_id, status, output, error in rows:
        i = ids.index(instance_id)
        expected = {
            "a": {"step": "a"},
            "b": {"step": "b"},
            "got": {"n": i},
            "c": {"step": "c"},
            "id": instance_id,
        }
        if status != "complete" or output != expected:
            problems.append(f"{instance_id}: {status} {output or error}")
            continue
        events = history[pk]
        if [e[0] for e in events] != list(range(1, len(events) + 1)):
            problems.append(f"{instance_id}: history has gaps {[e[0] for e in events]}")
        stamps = [e[3] for e in events]
        if stamps != sorted(stamps):
            problems.append(f"{instance_id}: history timestamps go backwards")
        committed = {e[2]["name"]: e[3] for e in events if e[1] == "StepCompleted"}
        if set(committed) != {"a", "b", "go", "c"} or "SleepCompleted" not in {e[1] for e in events}:
            problems.append(f"{instance_id}: completed steps {sorted(committed)}")
        lines = _log_lines(logs[instance_id])
        retried += sum(1 for name, _ in lines if name == "b") >= 2
        runs = collections.Counter(name for name, _ in lines)
        duplicated += runs["a"] > 1 or runs["b"] > 2 or runs["c"] > 1
        for name, at in lines:
            limit = committed.get(name)
            if limit is not None and dt.datetime.fromtimestamp(at, dt.UTC) > limit:
                problems.append(f"{instance_id}: effect {name!r} started at {at} after its commit at {limit}")
        for name in ("a", "b", "c"):
            if not any(line[0] == name for line in lines):
                problems.append(f"{instance_id}: effect {name!r} never ran")
    log.info("chaos: seed %s, %s kills, %s instances re-ran an interrupted effect", SEED, kills, duplicated)
    assert len(rows) == INSTANCES
    assert not problems, "\n".join(problems[:30])
    assert retried == INSTANCES  # every instance went through a failed attempt and its retry
    assert duplicated >= 1, "no kill interrupted a running effect: the chaos proved nothing"
