"""WorkerCronTrigger through the HTTP API and the Operation reconciler (in-process): the schedule
that ``register_schedule_txn`` / ``unregister_schedule_txn`` keep, the ``observed`` the trigger
shows, the runs listing, and the rejected ``cron`` field cases (docs/spec/cron-trigger.md#cr-grammar; docs/spec/http-api.md, docs/spec/cron-trigger.md#cr-runs)."""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest
import sqlalchemy as sa

from models import cron as cron_models
from models import db as models_db
from models import resources as res_models
from tests.integration.test_resources_support import (
    create_ok,
    deployed_worker,
    headers,
    post,
    settle,
)

CASES_PATH = pathlib.Path(__file__).resolve().parents[1] / "data" / "cases.json"
REJECTED = [
    (case["id"], expression)
    for case in json.loads(CASES_PATH.read_text(encoding="utf-8"))
    if case["area"] == "cron" and case["expected"].get("valid") is False
    for expression in case["input"]["cron_each"]
]


def _schedule(trigger_uid: str) -> cron_models.CronSchedule | None:
    with models_db.session_scope() as session:
        return session.get(cron_models.CronSchedule, trigger_uid)


def _resource(client, space: str, token: str, uid: str) -> dict:
    response = client.get(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, None))
    assert response.status_code == 200, response.get_json()
    return response.get_json()


@pytest.mark.usefixtures("no_dispatch")
def test_trigger_lifecycle_over_http_keeps_the_schedule(
    client, db_url: str, space_token: tuple[str, str]
) -> None:
    space, token = space_token
    worker, _, _ = deployed_worker(client, space, token)
    before = dt.datetime.now(dt.UTC)
    trigger = create_ok(
        client, space, token, "WorkerCronTrigger", {"worker": {"resourceUid": worker}, "cron": "*/5 * * * *"}
    )
    observed = _resource(client, space, token, trigger)["observed"]
    read = dt.datetime.now(dt.UTC)  # the schedule was registered between `before` and now
    assert {k: observed[k] for k in ("cron", "timezone", "scheduleReady")} == {
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "scheduleReady": True,
    }
    next_match = dt.datetime.fromisoformat(observed["nextMatchAt"].replace("Z", "+00:00"))
    assert observed["nextMatchAt"].endswith(":00Z") and next_match.minute % 5 == 0
    # The first match after the registration: within 5 minutes of it (not of `before`: a create
    # that starts at 07:24:59.99 and registers at 07:25:00.01 next matches at 07:30:00).
    assert before < next_match <= read + dt.timedelta(minutes=5)
    schedule = _schedule(trigger)
    assert schedule.cron == "*/5 * * * *" and schedule.worker_uid == worker and schedule.deleted_at is None
    runs = client.get(f"/v2/spaces/{space}/resources/{trigger}/runs", headers=headers(token, None))
    assert runs.status_code == 200 and "runs" in runs.get_json()

    # PUT (whole spec): the new expression for future matches only (CB-05).
    response = client.put(
        f"/v2/spaces/{space}/resources/{trigger}",
        headers=headers(token),
        json={"spec": {"worker": {"resourceUid": worker}, "cron": "0 0 31 2 *"}},
    )
    assert response.status_code == 202, response.get_json()
    assert settle(response.get_json()["id"])["state"] == "succeeded"
    assert _resource(client, space, token, trigger)["observed"] == {
        "cron": "0 0 31 2 *",
        "timezone": "UTC",
        "scheduleReady": True,
    }
    schedule = _schedule(trigger)
    assert schedule.cron == "0 0 31 2 *" and [s["cron"] for s in schedule.superseded] == ["*/5 * * * *"]

    # DELETE: the boundary is persisted; the runs of a deleted trigger are gone from the API.
    response = client.delete(f"/v2/spaces/{space}/resources/{trigger}", headers=headers(token))
    assert response.status_code == 202
    assert settle(response.get_json()["id"])["state"] == "succeeded"
    schedule = _schedule(trigger)
    assert schedule.deleted_at is not None and schedule.deleted_at >= before
    runs = client.get(f"/v2/spaces/{space}/resources/{trigger}/runs", headers=headers(token, None))
    assert runs.status_code == 404


@pytest.mark.usefixtures("no_dispatch")
@pytest.mark.parametrize("case_id,expression", REJECTED, ids=[f"{c}:{e}" for c, e in REJECTED])
def test_rejected_cron_cases_register_no_schedule(
    client, db_url: str, space_token: tuple[str, str], case_id: str, expression: str
) -> None:
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    response = post(
        client, space, token, "WorkerCronTrigger", {"worker": {"resourceUid": worker}, "cron": expression}
    )
    assert response.status_code == 400, (case_id, response.get_json())
    assert response.get_json()["error"]["code"] == "invalid_spec"
    with models_db.session_scope() as session:
        triggers = session.scalars(
            sa.select(res_models.Resource.uid).where(
                res_models.Resource.space == space, res_models.Resource.form == "WorkerCronTrigger"
            )
        ).all()
        schedules = session.scalars(
            sa.select(cron_models.CronSchedule.trigger_uid).where(cron_models.CronSchedule.space == space)
        ).all()
    assert triggers == [] and schedules == []
