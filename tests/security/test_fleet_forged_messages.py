"""A forged or malformed task message changes nothing it should not (docs/spec/host-features.md#hf-isolation).

An attacker holding the broker URL publishes straight into a real worker's queue: the three task
names with ids of instances, Operations and cron matches that must not move (another Space's
sleeping, waiting and complete instances, a succeeded Operation, a delivered match), with forged
epochs and lease tokens, wrong types and arities; unknown and Celery built-in task names; and raw
messages Celery never sends (pickle, undecodable JSON, wrong body shapes, bad headers). Every
task message carries only an id the task re-reads from Postgres, so the database must be
byte-for-byte the same afterwards, and the worker must still be alive and still run work.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import time
import uuid

import redis
import sqlalchemy as sa
from celery import Celery
from kombu import Exchange, Queue

from core import config
from models import base as models_base
from models import cron as cron_models
from models import db as models_db
from models import resources as res_models
from models.base import utcnow
from services import tokens
from tests.support import workflows

VICTIM = """
class Victim:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        mode = event["params"]["mode"]
        step.do("first", lambda: {"ok": True})
        if mode == "sleep":
            step.sleep("nap", 3600)
        elif mode == "wait":
            step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 3600})
        return {"mode": mode}
"""


class _Unpickled:
    """Creates ``path`` if it is ever unpickled (it must not be)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _attacker(namespace: str) -> Celery:
    app = Celery("attacker", broker=config.load_settings().redis_url)
    app.conf.broker_transport_options = {"global_keyprefix": f"{namespace}:"}
    app.conf.broker_connection_retry_on_startup = True
    return app


def _snapshot(db_url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the schema, in primary-key order."""
    tables = {}
    with models_db.session_scope(db_url) as session:
        for table in models_base.Base.metadata.sorted_tables:
            order = list(table.primary_key.columns) or list(table.columns)
            tables[table.name] = [tuple(row) for row in session.execute(sa.select(table).order_by(*order))]
    return tables


def _drained(client: redis.Redis, namespace: str, queue: str) -> bool:
    return client.llen(f"{namespace}:{queue}") == 0 and client.hlen(f"{namespace}:unacked") == 0


def _raw(producer, queue: Queue, *, body: bytes, content_type: str, headers: dict | None) -> None:
    producer.publish(
        body,
        exchange=queue.exchange,
        routing_key=queue.routing_key,
        declare=[queue],
        content_type=content_type,
        content_encoding="binary" if content_type == "application/x-python-serialize" else "utf-8",
        headers=headers or {},
        correlation_id=uuid.uuid4().hex,
        retry=True,
    )


def _task_headers(name: str, **extra: object) -> dict:
    task_id = uuid.uuid4().hex
    return {
        "lang": "py", "task": name, "id": task_id, "root_id": task_id, "parent_id": None,
        "group": None, "retries": 0, "timelimit": [None, None], "eta": None, "expires": None,
        **extra,
    }


def test_forged_and_malformed_task_messages_change_nothing(tmp_path):
    with workflows.private_stack(workers=1, beat=False) as stack:
        worker = stack.processes[-1]
        # The victim: another Space than the one the canary runs in.
        other = f"s{uuid.uuid4().hex[:12]}"
        with models_db.session_scope(stack.db_url) as session:
            other_token = tokens.create_token_txn(session, space=other)
        victim = workflows.deploy_http(stack.api_url, other_token, other, source=VICTIM, class_name="Victim")
        victims = workflows.HttpInstances(stack.api_url, other_token, other, victim.workflow)
        for mode, status in (("sleep", "sleeping"), ("wait", "waiting"), ("done", "complete")):
            code, body = victims.call("POST", body={"id": mode, "params": {"mode": mode}})
            assert code == 201, body
            workflows.wait_until(lambda m=mode, s=status: victims.status(m)["status"] == s,
                                 timeout=180, message=f"victim {mode} {status}")
        pks = {
            mode: workflows.instance_row(stack.db_url, workflow=victim.workflow, instance_id=mode).pk
            for mode in ("sleep", "wait", "done")
        }
        now = utcnow()
        with models_db.session_scope(stack.db_url) as session:
            operation_ids = list(session.scalars(
                sa.select(res_models.Operation.id).where(res_models.Operation.space == other)
            ))
            delivered = cron_models.CronMatch(
                trigger_uid=str(uuid.uuid4()), space=other, worker_uid=victim.worker, cron="* * * * *",
                scheduled_time=now - dt.timedelta(minutes=5), recorded_at=now - dt.timedelta(minutes=5),
                dispatched_at=now - dt.timedelta(minutes=5), state="done",
            )
            session.add(delivered)
            session.flush()
            match_pk = delivered.pk
        assert operation_ids

        queue_name = f"{stack.namespace}.tasks"  # Settings.queue of the stack's namespace
        queue = Queue(queue_name, Exchange(queue_name), routing_key=queue_name)
        client = redis.Redis.from_url(config.load_settings().redis_url)
        marker = tmp_path / "unpickled"
        before = _snapshot(stack.db_url)

        attacker = _attacker(stack.namespace)
        try:
            garbage = ["abc", None, [1], {"pk": 1}, 2**70, -1, 1.5, True, "1 OR 1=1", "x" * 10_000, ""]
            sends: list[tuple[str, list, dict]] = []
            for pk in [*pks.values(), 10**12]:
                sends.append(("takohost.run_context", [pk], {}))
                sends.append(("takohost.run_context", [pk], {"epoch": 10**6, "lease_token": "forged"}))
                sends.append(("takohost.run_context", [pk, 10**6], {}))
                sends.append(("takohost.run_context", [], {"instance_pk": pk, "space": other}))
                sends.append(("takohost.deliver_cron_match", [pk], {}))
            for value in garbage:
                sends.append(("takohost.run_context", [value], {}))
                sends.append(("takohost.reconcile_operation", [value], {}))
                sends.append(("takohost.deliver_cron_match", [value], {}))
            for operation_id in [*operation_ids, str(uuid.uuid4()), "' OR 1=1 --"]:
                sends.append(("takohost.reconcile_operation", [operation_id], {}))
                sends.append(("takohost.reconcile_operation", [operation_id], {"force": True}))
            sends += [
                ("takohost.deliver_cron_match", [match_pk], {}),
                ("takohost.deliver_cron_match", [match_pk], {"event": {"scheduledTime": 0}}),
                ("takohost.run_context", [], {}),
                ("takohost.evil", [1], {}),
                ("os.system", ["touch " + str(tmp_path / "system")], {}),
                ("celery.backend_cleanup", [], {}),
                ("celery.chord_unlock", ["x", []], {}),
                ("celery.map", [{"task": "takohost.run_context"}, [[pks["sleep"]]]], {}),
                ("celery.starmap", [{"task": "os.system"}, [["id"]]], {}),
                ("celery.group", [[{"task": "takohost.run_context", "args": [pks["wait"]]}]], {}),
            ]
            for name, args, kwargs in sends:
                attacker.send_task(name, args=args, kwargs=kwargs, queue=queue_name)

            with attacker.connection_for_write() as conn:
                producer = conn.Producer()
                run = "takohost.run_context"
                raw = [
                    # a pickle that would create a file when loaded
                    (pickle.dumps(((_Unpickled(str(marker)),), {}, {})), "application/x-python-serialize",
                     _task_headers(run)),
                    (b"{not json", "application/json", _task_headers(run)),
                    (b"\xff\xfe\x00", "application/json", _task_headers(run)),
                    (json.dumps({"a": 1}).encode(), "application/json", _task_headers(run)),
                    (json.dumps("text").encode(), "application/json", _task_headers(run)),
                    (json.dumps([pks["sleep"]]).encode(), "application/json", _task_headers(run)),
                    (json.dumps([[pks["sleep"]], {}, "embed"]).encode(), "application/json", _task_headers(run)),
                    (json.dumps([[pks["sleep"]], [], {}]).encode(), "application/json", _task_headers(run)),
                    (json.dumps([[pks["sleep"]], {}, {"callbacks": "x", "chain": 5}]).encode(),
                     "application/json", _task_headers(run)),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/json",
                     _task_headers(run, eta="not-a-date")),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/json",
                     _task_headers(run, expires="soon")),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/json",
                     _task_headers(run, timelimit="abc", retries="many")),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/json", {"id": "no-task-name"}),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/json", None),
                    (json.dumps([[pks["sleep"]], {}, {}]).encode(), "application/x-yaml", _task_headers(run)),
                    (b"\x00" * 1000, "application/octet-stream", _task_headers(run)),
                ]
                for body, content_type, headers in raw:
                    _raw(producer, queue, body=body, content_type=content_type, headers=headers)

            try:
                workflows.wait_until(lambda: _drained(client, stack.namespace, queue_name), timeout=120,
                                     interval=0.2, message="every forged message consumed")
            except AssertionError:
                raise AssertionError(
                    f"queue {client.llen(f'{stack.namespace}:{queue_name}')} unacked "
                    f"{client.hlen(f'{stack.namespace}:unacked')}; worker alive {worker.alive()}:\n"
                    + worker.log()[-12000:]
                ) from None
            time.sleep(2.0)  # the last message's task, if any, finishes
            assert worker.alive(), worker.log()[-4000:]
            after = _snapshot(stack.db_url)
            for table, rows in before.items():
                assert after[table] == rows, f"a forged message changed table {table}"
            assert not marker.exists(), "a pickled message was loaded"
            assert not (tmp_path / "system").exists()
            assert [victims.status(mode)["status"] for mode in ("sleep", "wait", "done")] == [
                "sleeping", "waiting", "complete"
            ]

            # The worker still consumes its queue and runs work.
            canary_workflow = workflows.deploy(stack.db_url, space=stack.space, source=VICTIM, class_name="Victim")
            canary = stack.instances(canary_workflow.workflow)
            assert canary.call("POST", body={"id": "canary", "params": {"mode": "done"}})[0] == 201
            final = workflows.wait_until(
                lambda: (s := canary.status("canary"))["status"] in ("complete", "errored") and s,
                timeout=180, message="the canary finished",
            )
            assert final == {"id": "canary", "status": "complete", "output": {"mode": "done"}}
            assert worker.alive()
            assert "Unrecoverable error" not in worker.log()
        finally:
            attacker.close()
