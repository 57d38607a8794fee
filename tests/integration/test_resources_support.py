"""Helpers shared by the resource/Operation tests (no tests here).

``settle(op_id)`` reconciles an Operation in-process (``workers.operations_tasks.reconcile``) and
waits until it is final, so integration tests need no worker process. The ``no_dispatch``
fixture (``tests/integration/conftest.py``) keeps the API from sending reconcile messages (the session's real worker, if another
test started it, would otherwise race these tests); the beat sweep only re-dispatches an
Operation after ``redispatch_after`` (2 s), and ``hold(op_id)`` takes the Operation's reconcile
lock so that no process can finish it while a test looks at its unfinished state.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import sqlalchemy as sa

FORMS = {
    "ModuleWorker": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
    "WorkerVersion": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
    "WorkerDeployment": "https://edge.forms.takoform.com/forms/WorkerDeployment/0.4.0/",
    "DurableWorkflow": "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/",
    "WorkerCronTrigger": "https://edge.forms.takoform.com/forms/WorkerCronTrigger/0.3.0/",
}

#: A main module exporting ReportWorkflow (callable run) and a scheduled handler.
MAIN_FULL = (
    "class ReportWorkflow:\n"
    "    def __init__(self, env):\n"
    "        self.env = env\n"
    "    def run(self, event, step):\n"
    "        return {}\n"
    "\n"
    "def scheduled(event, env, ctx):\n"
    "    pass\n"
)
#: Exports ReportWorkflow only (no scheduled handler).
MAIN_CLASS_ONLY = MAIN_FULL.split("\ndef scheduled")[0] + "\n"
#: Exports another class and no scheduled handler.
MAIN_OTHER = "class OtherWorkflow:\n    def __init__(self, env):\n        pass\n    def run(self, event, step):\n        return None\n"


@contextlib.contextmanager
def hold(op_id: str):
    """Hold Operation ``op_id``'s reconcile lock: nobody can reconcile it inside the block."""
    from models import db as models_db
    from workers import operations_tasks

    with operations_tasks.operation_lock(models_db.get_engine(models_db.database_url()), op_id) as held:
        assert held, f"Operation {op_id} is being reconciled elsewhere"
        yield


def headers(token: str, key: str | None = "auto") -> dict:
    """Authorization (+ a fresh Idempotency-Key unless ``key`` is None)."""
    result = {"Authorization": f"Bearer {token}"}
    if key == "auto":
        key = uuid.uuid4().hex
    if key is not None:
        result["Idempotency-Key"] = key
    return result


def name(prefix: str = "r") -> str:
    """A fresh valid resource name."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def post(
    client,
    space: str,
    token: str,
    form: str,
    spec: dict,
    *,
    res_name: str | None = None,
    key: str | None = "auto",
    extra: dict | None = None,
):
    """POST a create; returns the response."""
    body = {"form": FORMS[form], "name": res_name or name(form.lower()[:6]), "spec": spec, **(extra or {})}
    return client.post(f"/v2/spaces/{space}/resources", json=body, headers=headers(token, key))


def settle(op_id: str, *, timeout: float = 30.0) -> dict:
    """Reconcile ``op_id`` in-process until final; returns the Operation view."""
    from host_api import schemas
    from models import db as models_db
    from models import resources as res_models
    from workers import operations_tasks

    deadline = time.monotonic() + timeout
    while True:
        operations_tasks.reconcile(op_id, validate=True)  # both processes' parts, in-process
        with models_db.session_scope() as session:
            op = session.get(res_models.Operation, op_id)
            view = schemas.OperationView().dump(op)
        if view["state"] in ("succeeded", "failed"):
            return view
        if time.monotonic() > deadline:
            raise TimeoutError(f"Operation {op_id} still {view['state']}")
        time.sleep(0.2)


def create_ok(client, space: str, token: str, form: str, spec: dict, **kwargs) -> str:
    """Create and settle; asserts success; returns the new resource UID."""
    response = post(client, space, token, form, spec, **kwargs)
    assert response.status_code == 202, response.get_json()
    op = settle(response.get_json()["id"])
    assert op["state"] == "succeeded", op
    return op["resourceUid"]


def version_spec(worker_uid: str, main: str = MAIN_FULL, **more) -> dict:
    """A WorkerVersion spec with ``main.py`` = ``main``."""
    return {
        "worker": {"resourceUid": worker_uid},
        "mainModule": "main.py",
        "modules": {"main.py": main},
        **more,
    }


def deployment_spec(worker_uid: str, *versions: tuple[str, int]) -> dict:
    """A WorkerDeployment spec weighting ``(version_uid, weight)`` pairs."""
    return {
        "worker": {"resourceUid": worker_uid},
        "versions": [{"version": {"resourceUid": v}, "weight": w} for v, w in versions],
    }


def deployed_worker(client, space: str, token: str, main: str = MAIN_FULL) -> tuple[str, str, str]:
    """A Worker with one validated Version deployed at weight 100: ``(worker, version, deployment)``."""
    worker = create_ok(client, space, token, "ModuleWorker", {})
    version = create_ok(client, space, token, "WorkerVersion", version_spec(worker, main))
    deployment = create_ok(client, space, token, "WorkerDeployment", deployment_spec(worker, (version, 100)))
    return worker, version, deployment


#: Tables that hold no tenant data and are written on every beat tick (its liveness row).
SNAPSHOT_EXCLUDED = {"beat_ticks"}


def snapshot(db_url: str, spaces: list[str]) -> dict:
    """Row counts and a content hash of every table, restricted to rows of ``spaces`` where a
    table can be related to a Space (so background beat/worker activity of other tests' Spaces
    does not disturb the comparison); other tables, but ``SNAPSHOT_EXCLUDED``, are taken whole."""
    import hashlib

    from models import db as models_db
    from models.base import Base

    tables = Base.metadata.tables
    res = tables["resources"]
    space_uids = sa.select(res.c.uid).where(res.c.space.in_(spaces))
    result = {}
    engine = models_db.get_engine(db_url)
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if table.name in SNAPSHOT_EXCLUDED:
                continue
            cols = table.c
            query = sa.select(table)
            if "space" in cols:
                query = query.where(cols.space.in_(spaces))
            elif table.name == "spaces":
                query = query.where(cols.name.in_(spaces))
            elif "instance_pk" in cols:
                inst = tables["instances"]
                query = query.where(
                    cols.instance_pk.in_(sa.select(inst.c.pk).where(inst.c.space.in_(spaces)))
                )
            elif "match_pk" in cols:
                matches = tables["cron_matches"]
                query = query.where(
                    cols.match_pk.in_(sa.select(matches.c.pk).where(matches.c.space.in_(spaces)))
                )
            else:
                for name in ("source_uid", "trigger_uid", "workflow_uid"):
                    if name in cols:
                        query = query.where(cols[name].in_(space_uids))
                        break
            rows = conn.execute(query).all()
            digest = hashlib.sha256(repr(sorted(repr(tuple(r)) for r in rows)).encode()).hexdigest()
            result[table.name] = (len(rows), digest)
    return result
