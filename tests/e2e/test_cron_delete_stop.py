"""Deleting a trigger stops its running deliveries (docs/spec/cron-trigger.md#cr-runs; docs/spec/cron-trigger.md#cr-crud "削除", "過去の一致で進行中の
handlerは、Hostが安全に停止を保証できない限り"): a ``scheduled`` handler that never returns holds the
only worker slot; a DELETE through the HTTP API succeeds within a bounded time without a worker
restart, and the handler process is dead (it stops appending to its file in
``TAKOHOST_TEST_SANDBOX_SHARED_DIR``). Real API, worker (one slot) and beat on a private database.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from models import cron as cron_models
from models import db as models_db
from tests.support import workflows

pytestmark = pytest.mark.slow

FOREVER = """
import time
def scheduled(event, env, ctx):
    while True:
        with open(env.OUT, "a") as f:
            f.write("x")
        time.sleep(0.05)
"""
FORMS = {**workflows.FORM_VERSIONS, "WorkerCronTrigger": "0.3.0"}


def _create(session: requests.Session, base: str, space: str, form: str, spec: dict) -> str:
    body = {
        "form": workflows.FORM.format(f"{form}/{FORMS[form]}"),
        "name": f"r{uuid.uuid4().hex[:12]}",
        "spec": spec,
    }
    response = session.post(
        f"{base}/v2/spaces/{space}/resources", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )
    assert response.status_code == 202, response.text
    return workflows._wait_operation(session, base, space, response.json())["resourceUid"]


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return -1


@pytest.mark.timeout(300)
def test_deleting_a_trigger_stops_its_endless_handler_and_the_delete_succeeds(tmp_path) -> None:
    out = tmp_path / "ticks"
    shared = os.environ.get("TAKOHOST_TEST_SANDBOX_SHARED_DIR") or str(tmp_path)
    env = {"TAKOHOST_TEST_SANDBOX_SHARED_DIR": shared}
    with workflows.private_stack(workers=1, extra_env=env) as stack:
        base, space = stack.api_url, stack.space
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {stack.token}"
        worker = _create(http, base, space, "ModuleWorker", {})
        version = _create(
            http,
            base,
            space,
            "WorkerVersion",
            workflows.version_spec(worker=worker, source=FOREVER, variables={"OUT": str(out)}),
        )
        _create(
            http,
            base,
            space,
            "WorkerDeployment",
            {
                "worker": {"resourceUid": worker},
                "versions": [{"version": {"resourceUid": version}, "weight": 100}],
            },
        )
        trigger = _create(
            http, base, space, "WorkerCronTrigger", {"worker": {"resourceUid": worker}, "cron": "* * * * *"}
        )
        workflows.wait_until(
            lambda: _size(out) > 0, timeout=90, interval=0.2, message="the handler's first write"
        )

        started = time.monotonic()
        response = http.delete(
            f"{base}/v2/spaces/{space}/resources/{trigger}", headers={"Idempotency-Key": uuid.uuid4().hex}
        )
        assert response.status_code == 202, response.text
        op = workflows._wait_operation(http, base, space, response.json(), timeout=30)
        assert op["state"] == "succeeded"
        assert time.monotonic() - started < 30

        # The handler is dead: no more writes (the worker process was never restarted).
        before = _size(out)
        time.sleep(2)
        assert _size(out) == before, "the handler still runs after its trigger's DELETE succeeded"
        assert all(p.alive() for p in stack.processes)
        with models_db.session_scope(stack.db_url) as session:
            rows = session.execute(
                sa.select(
                    cron_models.CronMatch.state,
                    cron_models.CronDelivery.outcome,
                    cron_models.CronDelivery.error,
                )
                .join(cron_models.CronDelivery, cron_models.CronDelivery.match_pk == cron_models.CronMatch.pk)
                .where(cron_models.CronMatch.trigger_uid == trigger)
            ).all()
        assert [tuple(r) for r in rows] == [
            (
                "done",
                "failed",
                "the WorkerCronTrigger is being deleted: the handler was stopped (what it did so far is kept)",
            )
        ]
        assert http.get(f"{base}/v2/spaces/{space}/resources/{trigger}").status_code == 404
        for process in stack.processes:
            assert "Traceback" not in process.log(), process.log()[-3000:]
