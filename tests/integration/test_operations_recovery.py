"""Unfinished Operations are resumed after a worker dies (docs/spec/http-api.md#api-op: "unfinished Operations
are resumed after any restart (a sweep finds them)").

A WorkerVersion whose module sleeps 5 s at import is reconciled by a private worker (its own
Celery queues, so no other worker of the session can take the message first); the worker is
SIGKILLed while validating. Its reconcile lock dies with its database connection; a new worker
and a real beat process (sweeping every ``TAKOHOST_SWEEP_INTERVAL_S`` = 1 s), on the same private
queues, finish the same Operation. Private, because a worker that an e2e module of the same
xdist process started on the session's database shares the session's queues: it took the
sweep's messages and, finding no such Operation in its database, dropped them (a failed CI run).
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import sqlalchemy as sa

from tests.integration.test_resources_support import version_spec


def _op_state(db_url: str, op_id: str) -> str:
    from models import db as models_db

    with models_db.session_scope(db_url) as session:
        return session.execute(sa.text("SELECT state FROM operations WHERE id = :i"), {"i": op_id}).scalar()


def _wait_state(db_url: str, op_id: str, states: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _op_state(db_url, op_id)
        if state in states:
            return state
        time.sleep(0.1)
    raise AssertionError(f"Operation {op_id} still {_op_state(db_url, op_id)} after {timeout} s")


def test_operation_survives_sigkill_of_its_worker(db_url, space_token):
    from core import config
    from models import db as models_db
    from models.base import utcnow
    from services import celery_app, resources
    from services.idempotency import KeyedRequest
    from tests.support import processes

    space, _ = space_token
    private_ns = f"tkp{uuid.uuid4().hex[:8]}"
    private_env = {"TAKOHOST_NAMESPACE": private_ns}
    doomed = processes.start_worker(concurrency=1, env=private_env)
    rescuer = sweeper = None
    try:
        with models_db.session_scope(db_url) as session:
            worker = resources.accept_create_txn(
                session,
                space=space,
                idempotency=KeyedRequest(uuid.uuid4().hex, "w"),
                form="ModuleWorker",
                name="w",
                spec={},
                now=utcnow(),
            )
            worker_uid = worker.operation.resource_uid
        with models_db.session_scope(db_url) as session:
            accepted = resources.accept_create_txn(
                session,
                space=space,
                idempotency=KeyedRequest(uuid.uuid4().hex, "v"),
                form="WorkerVersion",
                name="slow",
                spec=version_spec(
                    worker_uid,
                    "import time\ntime.sleep(5)\nclass ReportWorkflow:\n"
                    "    def __init__(self, env): pass\n    def run(self, e, s): pass\n",
                ),
                now=utcnow(),
            )
            op_id = accepted.operation.id
        private = celery_app.make_celery(dataclasses.replace(config.load_settings(), namespace=private_ns))
        private.send_task("takohost.reconcile_operation", args=[op_id], queue=f"{private_ns}.tasks")
        _wait_state(db_url, op_id, {"running"}, timeout=30)
        time.sleep(1.0)  # inside the 5 s import
        doomed.kill()
        doomed.proc.wait(10)
        assert _op_state(db_url, op_id) == "running"

        rescuer = processes.start_worker(concurrency=1, env=private_env)
        sweeper = processes.start_beat(env=private_env)
        assert _wait_state(db_url, op_id, {"succeeded", "failed"}, timeout=60) == "succeeded"
        with models_db.session_scope(db_url) as session:
            observed = session.execute(
                sa.text("SELECT observed FROM resources WHERE uid = :u"),
                {"u": accepted.operation.resource_uid},
            ).scalar()
        assert observed["validated"] is True and observed["workflowClasses"] == ["ReportWorkflow"]
    finally:
        doomed.stop()
        if rescuer is not None:
            rescuer.stop()
        if sweeper is not None:
            sweeper.stop()
