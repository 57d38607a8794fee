"""Crash tests against real processes (docs/spec/host-features.md#hf-engine; docs/spec/architecture.md#ar-shape): SIGKILLed and frozen workers and
a Redis that lost every key of the host. Each test runs its own stack (database, Redis namespace,
API, workers, beat) so that killing it harms nobody else. Lease TTL 3 s (a normal setting).

Effects count their calls in files: a committed step never runs again; the killed effect may
(at-least-once, docs/spec/durable-workflow.md: "効果の実行後、結果commit前にHostが死ぬと効果は重複し得る").
"""

from __future__ import annotations

import signal
import time

import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from tests.support import workflows

STEPS = """
import os, time
class Steps:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect(name, pause=0.0):
            def run_it():
                with open(p["log"], "a") as f:
                    f.write(name + "\\n")
                if pause and not os.path.exists(p["marker"] + "." + name):   # only the first call pauses
                    open(p["marker"] + "." + name, "w").close()
                    time.sleep(pause)
                return {"step": name}
            return run_it
        a = step.do("a", effect("a"))
        if p.get("between") and not os.path.exists(p["marker"] + ".between"):
            open(p["marker"] + ".between", "w").close()
            time.sleep(p["between"])           # a context between two steps (the first time)
        b = step.do("b", effect("b", p.get("pause_b", 0.0)))
        c = step.do("c", effect("c"))
        return {"a": a, "b": b, "c": c}
"""


def _lines(path):
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def _completions(db_url, workflow, instance_id):
    with models_db.session_scope(db_url) as session:
        pk = session.scalar(
            sa.select(inst_models.Instance.pk).where(
                inst_models.Instance.workflow_uid == workflow, inst_models.Instance.instance_id == instance_id
            )
        )
        rows = session.execute(
            sa.select(inst_models.HistoryEvent.attributes).where(
                inst_models.HistoryEvent.instance_pk == pk,
                inst_models.HistoryEvent.event_type == "StepCompleted",
            )
        ).all()
    return sorted(row[0]["name"] for row in rows)


def _finish(http, instance_id, timeout=60):
    return workflows.wait_until(
        lambda: (s := http.status(instance_id))["status"] in ("complete", "errored") and s,
        timeout=timeout,
        message=f"{instance_id} finished",
    )


def _crash_and_recover(tmp_path, params_extra, marker_suffix, pool="prefork", concurrency=1):
    with workflows.private_stack(workers=1, worker_pool=pool, worker_concurrency=concurrency) as stack:
        first_worker = next(p for p in stack.processes if p.name == "worker")
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=STEPS, class_name="Steps")
        http = stack.instances(deployed.workflow)
        log, marker = str(tmp_path / "log"), str(tmp_path / "m")
        code, body = http.call(
            "POST", body={"id": "crash", "params": {"log": log, "marker": marker, **params_extra}}
        )
        assert code == 201, body
        workflows.wait_until(lambda: (tmp_path / f"m.{marker_suffix}").exists(), timeout=60, message="marker")
        first_worker.kill(signal.SIGKILL)
        first_worker.proc.wait(10)
        assert http.status("crash")["status"] == "running"
        stack.start_worker(pool=pool, concurrency=concurrency)
        final = _finish(http, "crash")
        assert final == {
            "id": "crash",
            "status": "complete",
            "output": {"a": {"step": "a"}, "b": {"step": "b"}, "c": {"step": "c"}},
        }
        assert _completions(stack.db_url, deployed.workflow, "crash") == [
            "a",
            "b",
            "c",
        ]  # nothing lost, nothing twice
        return _lines(log)


def test_sigkill_while_an_effect_runs(tmp_path):
    calls = _crash_and_recover(tmp_path, {"pause_b": 30.0}, "b")
    assert calls.count("a") == 1 and calls.count("c") == 1  # committed steps never re-run
    assert calls.count("b") == 2  # the killed effect ran again (at least once)


def test_sigkill_of_a_solo_pool_worker_while_an_effect_runs(tmp_path):
    """``takohost worker --concurrency 2`` (the default solo pool: two solo processes, each running
    contexts itself with its own zygote, under one supervisor), SIGKILLed as a process group: the
    same crash guarantees hold."""
    calls = _crash_and_recover(tmp_path, {"pause_b": 30.0}, "b", pool="solo", concurrency=2)
    assert calls.count("a") == 1 and calls.count("c") == 1
    assert calls.count("b") == 2


def test_sigkill_while_a_context_is_between_steps(tmp_path):
    calls = _crash_and_recover(tmp_path, {"between": 30.0}, "between")
    assert calls == ["a", "b", "c"]


FENCED = """
import time
class Fenced:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        log = event["params"]["log"]
        def effect():
            with open(log, "a") as f: f.write("call\\n")
            time.sleep(event["params"]["seconds"])
            return {"v": 1}
        return step.do("a", effect)
"""


def test_WF_23_a_frozen_owner_is_fenced_when_it_wakes_up(tmp_path):
    with workflows.private_stack(workers=1) as stack:
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=FENCED, class_name="Fenced")
        http = stack.instances(deployed.workflow)
        log = tmp_path / "log"
        assert http.call("POST", body={"id": "wf23", "params": {"log": str(log), "seconds": 4}})[0] == 201
        workflows.wait_until(lambda: _lines(log) == ["call"], timeout=60, message="first call")
        frozen = stack.processes[1]
        frozen.kill(signal.SIGSTOP)  # the worker (and its context) freeze longer than the lease TTL
        try:
            stack.start_worker()
            workflows.wait_until(
                lambda: len(_lines(log)) == 2, timeout=60, message="second owner ran the effect"
            )
        finally:
            frozen.kill(signal.SIGCONT)
        final = _finish(http, "wf23")
        assert final == {"id": "wf23", "status": "complete", "output": {"v": 1}}
        # The stale owner woke up, tried to go on and was refused: by the fence when its commit came
        # first ('fenced'), or by its heartbeat finding the lease taken when that came first
        # ('lease_lost'; it kills the child before the commit). Which one wins is a race of two
        # threads of the woken process; either way nothing of it is recorded (asserted below).
        workflows.wait_until(
            lambda: "'fenced'" in frozen.log() or "'lease_lost'" in frozen.log(),
            timeout=30,
            message="stale owner refused",
        )
        assert _completions(stack.db_url, deployed.workflow, "wf23") == ["a"]  # exactly one completion record
        assert len(_lines(log)) == 2
        assert http.status("wf23")["status"] == "complete"


MANY = """
class Many:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        out = []
        for i in range(4):
            out.append(step.do(f"s{i}", lambda i=i: {"i": i}))
            step.sleep(f"z{i}", 1)
        got = step.wait_for_event("w", {"type": "go", "timeoutSeconds": 3600})
        return {"n": len(out), "got": got}
"""


def test_losing_every_redis_key_loses_no_instance(tmp_path):
    with workflows.private_stack(workers=2) as stack:
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=MANY, class_name="Many")
        http = stack.instances(deployed.workflow)
        ids = [f"r{i}" for i in range(12)]
        for instance_id in ids:
            assert http.call("POST", body={"id": instance_id})[0] == 201
        time.sleep(1.5)  # mid-run: contexts running, sleeps pending, messages queued
        assert stack.flush_redis() > 0  # leases, broker queue, unacknowledged messages: all gone
        for instance_id in ids:
            workflows.wait_until(
                lambda i=instance_id: http.status(i)["status"] == "waiting",
                timeout=90,
                message=f"{instance_id} waiting",
            )
        stack.flush_redis()  # and once more while everything waits
        for instance_id in ids:
            assert http.call("POST", "/" + http.enc(instance_id) + "/events", body={"type": "go"})[0] == 202
        for instance_id in ids:
            assert _finish(http, instance_id, timeout=90) == {
                "id": instance_id,
                "status": "complete",
                "output": {"n": 4, "got": None},
            }
            assert _completions(stack.db_url, deployed.workflow, instance_id) == sorted(
                [f"s{i}" for i in range(4)] + ["w"]
            )
