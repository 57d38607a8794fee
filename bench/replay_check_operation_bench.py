"""The replay check of a created Version as the host runs it (docs/spec/host-features.md#hf-testing;
docs/testing.md "Checking a candidate against live instances"): one ``check`` Operation over
``--instances`` live instances whose histories hold ``--steps`` completed ``do`` steps and a
pending wait, run by ``workers.version_check.run_operation`` — the reconcile the validation
process runs — end to end: reading each history from Postgres, replaying it in a sandbox child,
recording progress and the Version's ``observed.replayCheck``.

    python -m bench.replay_check_operation_bench                      # 1,000 instances of 20 steps
    python -m bench.replay_check_operation_bench --instances 200 --steps 5

It makes a scratch database on ``TAKOHOST_TEST_DATABASE_URL`` (an admin URL; default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), migrates it, records one history with
``takohost.testing`` (the engine's own step semantics) and inserts it for every instance, then
runs the Operation once (``--rounds`` times, a new Operation each) and drops the database.
Prints one JSON line per round and a last line of medians: wall time per instance (ms), CPU per
instance (ms) of this process (the reconcile: reading histories, answering the child) and of the
zygote's tree (fork, import and replay in the sandbox), both from ``/proc``; Postgres's backends
are not counted. Not a timed test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
import uuid

import sqlalchemy as sa

from bench import proc_cpu, scratch
from bench.version_check_bench import _source

_TOML = '[worker]\nname = "long"\n[[workflows]]\nname = "long-flow"\nclass = "Long"\n'


def _recorded(steps: int) -> tuple[str, list[dict]]:
    """The workflow's source and one waiting instance's history (HTTP shape), from the test kit."""
    from takohost import testing

    source = _source(steps)
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "main.py"), "w") as f:
            f.write(source)
        with open(os.path.join(directory, "takohost.toml"), "w") as f:
            f.write(_TOML)
        instance = testing.start(directory, auto=False, id="recorded")
    assert instance.status == "waiting" and len(instance.steps) == steps + 1
    return source, instance.history


def _populate(url: str, *, instances: int, steps: int) -> tuple[str, str]:
    """Migrate ``url``; a Worker, its DurableWorkflow, a validated Version and ``instances``
    waiting instances with the recorded history. Returns ``(space, version uid)``."""
    from models import db as models_db
    from models import instances as inst_models
    from models import migrate
    from models import resources as res_models
    from services import tokens

    migrate.upgrade(url)
    source, history = _recorded(steps)
    space, now = "bench", dt.datetime.now(dt.UTC)
    with models_db.session_scope(url) as session:
        tokens.create_token_txn(session, space=space)  # the Space's row
    worker, workflow, version = (str(uuid.uuid4()) for _ in range(3))
    spec = {"worker": {"resourceUid": worker}, "mainModule": "main.py", "modules": {"main.py": source},
            "vars": {}, "workflowBindings": []}
    with models_db.session_scope(url) as session:
        for uid, form, name, resource_spec, observed in (
            (worker, "ModuleWorker", "long", {}, {}),
            (workflow, "DurableWorkflow", "long-flow", {"worker": {"resourceUid": worker}, "className": "Long"}, {}),
            (version, "WorkerVersion", "long-v1", spec, {"workflowClasses": ["Long"]}),
        ):
            session.add(res_models.Resource(
                uid=uid, space=space, form=form, name=name, generation=1, spec=resource_spec, observed=observed,
                output={}, phase="idle", worker_uid=None if form == "ModuleWorker" else worker,
                created_at=now, updated_at=now,
            ))
    rows = [
        {
            "workflow_uid": workflow, "space": space, "instance_id": f"i-{i:06d}", "status": "waiting", "epoch": 1,
            "created_at": now, "updated_at": now, "lifetime_ends_at": now + dt.timedelta(days=365),
            "step_count": steps + 1, "next_event_id": len(history) + 1, "next_sequence": 1, "inbox_count": 0,
            "inbox_bytes": 0,
        }
        for i in range(instances)
    ]
    with models_db.session_scope(url) as session:
        session.execute(sa.insert(inst_models.Instance), rows)
        pks = dict(session.execute(sa.select(inst_models.Instance.instance_id, inst_models.Instance.pk)).all())
    events = []
    for instance_id, pk in pks.items():
        for event in history:
            attributes = dict(event["attributes"])
            if event["eventType"] == "InstanceCreated":
                attributes["instanceId"] = instance_id
            events.append({
                "instance_pk": pk, "event_id": event["eventId"], "event_type": event["eventType"],
                "attributes": attributes, "event_timestamp": dt.datetime.fromisoformat(event["eventTimestamp"]),
            })
    with models_db.session_scope(url) as session:
        for start in range(0, len(events), 5000):
            session.execute(sa.insert(inst_models.HistoryEvent), events[start : start + 5000])
        session.execute(sa.text("ANALYZE"))
    return space, version


def _round(space: str, version: str, zygote) -> dict:
    """One ``check`` Operation, accepted and run to its end here."""
    from models import db as models_db
    from models import resources as res_models
    from services import operations, replay_checks
    from services.idempotency import KeyedRequest
    from workers import version_check

    now = dt.datetime.now(dt.UTC)
    with models_db.session_scope() as session:
        accepted = replay_checks.accept_check_txn(
            session, space=space, uid=version, idempotency=KeyedRequest(str(uuid.uuid4()), "bench"), request={}, now=now
        )
        op_id = accepted.operation.id
    with models_db.session_scope() as session:
        op = session.get(res_models.Operation, op_id)
        operations.set_state(op, operations.RUNNING, now=now)
    mine, tree, wall = proc_cpu.process_seconds(os.getpid()), proc_cpu.process_seconds(zygote.pid), time.perf_counter()
    version_check.run_operation(op_id)
    wall = time.perf_counter() - wall
    time.sleep(0.3)  # the last child is reaped into the zygote's counters
    parent, sandbox = proc_cpu.process_seconds(os.getpid()) - mine, proc_cpu.process_seconds(zygote.pid) - tree
    with models_db.session_scope() as session:
        check = session.get(res_models.Resource, version).observed["replayCheck"]
    assert check["operationId"] == op_id and check["passed"], check["totals"]
    n = check["totals"]["compatible"]
    return {"instances": n, "wall_s": round(wall, 2), "wall_ms_per_instance": round(wall / n * 1000, 2),
            "parent_cpu_ms_per_instance": round(parent / n * 1000, 2),
            "sandbox_cpu_ms_per_instance": round(sandbox / n * 1000, 2),
            "load_average": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    with scratch.scratch_database("takohost_check_bench") as db_url:
        os.environ["TAKOHOST_DATABASE_URL"] = db_url
        os.environ.setdefault("TAKOHOST_REPLAY_CHECK_TOTAL_TIMEOUT_S", "3600")  # this bench measures, unbounded
        from workers import sandbox

        space, version = _populate(db_url, instances=args.instances, steps=args.steps)
        zygote = sandbox.Zygote()
        zygote.start()
        sandbox.get_zygote = lambda: zygote  # the validation process's own zygote, as in the host
        try:
            rounds = []
            for _ in range(args.rounds):
                rounds.append(_round(space, version, zygote))
                print(json.dumps(rounds[-1]), flush=True)
        finally:
            zygote.stop()
    keys = [k for k in rounds[0] if k.endswith("per_instance")]
    print(json.dumps({"steps": args.steps, "instances": args.instances, "rounds": args.rounds,
                      **{f"median_{k}": round(statistics.median(r[k] for r in rounds), 2) for k in keys}}))

if __name__ == "__main__":
    main()
