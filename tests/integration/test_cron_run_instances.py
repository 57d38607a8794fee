"""A cron run links to the instances its handler started (docs/spec/cron-trigger.md#cr-runs).

A ``scheduled`` handler calls ``env.JOBS.create`` twice (one refused as ``instance_exists``); the
runs ledger (``GET …/runs``) lists each created instance under the delivery that created it, and
the console's trigger and run pages link to those instance pages. Before, the ledger and the
console said nothing of them. Real Postgres, Redis and sandbox children; the delivery runs in the
test process with the same code as the Celery task.
"""

from __future__ import annotations

import datetime as dt
import html

from models import db as models_db
from models import resources as res_models
from tests.integration.test_cron_support import at, create_stack, decide, deliveries_of
from tests.support import workflows
from workers import cron_tasks

HANDLER = """
from takohost import errors


def scheduled(event, env, ctx):
    env.JOBS.create(id="nightly-" + str(event["scheduledTime"]), params={"at": event["scheduledTime"]})
    try:
        env.JOBS.create(id="nightly-" + str(event["scheduledTime"]))
    except errors.InstanceExists:
        pass
    env.JOBS.create(id="extra")
"""

NOTHING = "def scheduled(event, env, ctx):\n    return None\n"

NAP = """
class Job:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}
"""


def _deliver(db_url: str, *, space: str, source: str, bindings: dict[str, str], zygote, minute: str):
    """Deliver the match at ``minute`` of a new trigger whose Version is ``source`` with
    ``bindings``; returns ``(trigger uid, the delivery's outcome)``."""
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=source, now=at(minute) - dt.timedelta(seconds=30)
    )
    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, stack.version_uid)
        version.spec = {
            **version.spec,
            "workflowBindings": [
                {"name": name, "resource": {"resourceUid": uid}} for name, uid in bindings.items()
            ],
        }
    [(match_pk, _)] = decide(
        db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid]
    )
    assert cron_tasks.deliver(match_pk, zygote=zygote) == "ok"
    [delivery] = deliveries_of(db_url, match_pk)
    return stack.trigger_uid, delivery.outcome


def test_the_ledger_and_the_console_link_a_run_to_the_instances_it_started(
    app, db_url, space_token, zygote, captured
):
    space, token = space_token
    jobs = workflows.deploy(db_url, space=space, source=NAP, class_name="Job")
    minute = "2030-06-07T08:05:00Z"
    trigger, outcome = _deliver(
        db_url, space=space, source=HANDLER, bindings={"JOBS": jobs.workflow}, zygote=zygote, minute=minute
    )
    assert outcome == "ok"
    first = f"nightly-{int(at(minute).timestamp() * 1000)}"
    client = app.test_client()

    ledger = client.get(
        f"/v2/spaces/{space}/resources/{trigger}/runs", headers={"Authorization": f"Bearer {token}"}
    )
    assert ledger.status_code == 200, ledger.text
    [run] = ledger.json["runs"]
    [delivery] = run["deliveries"]
    # The refused second create is not listed; the order is the handler's.
    assert delivery["instances"] == [
        {"workflow": jobs.workflow, "id": first},
        {"workflow": jobs.workflow, "id": "extra"},
    ]

    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    page = html.unescape(client.get(f"/ui/triggers/{trigger}").text)
    assert f'href="/ui/workflows/{jobs.workflow}/instance?id={first}"' in page
    assert f'href="/ui/workflows/{jobs.workflow}/instance?id=extra"' in page

    run_page = client.get(f"/ui/triggers/{trigger}/run", query_string={"t": run["scheduledTime"]})
    assert run_page.status_code == 200
    text = html.unescape(run_page.text)
    assert 'data-testid="started"' in text and f"/instance?id={first}" in text
    # Each link opens the instance's page.
    assert client.get(f"/ui/workflows/{jobs.workflow}/instance", query_string={"id": first}).status_code == 200

    # A time with no run is a 404, not an empty page.
    missing = client.get(f"/ui/triggers/{trigger}/run", query_string={"t": "2030-06-07T08:06:00Z"})
    assert missing.status_code == 404


def test_a_run_that_started_nothing_says_so_and_lists_no_instances(app, db_url, space_token, zygote, captured):
    space, token = space_token
    trigger, outcome = _deliver(
        db_url, space=space, source=NOTHING, bindings={}, zygote=zygote, minute="2030-06-07T08:10:00Z"
    )
    assert outcome == "ok"
    client = app.test_client()
    [run] = client.get(
        f"/v2/spaces/{space}/resources/{trigger}/runs", headers={"Authorization": f"Bearer {token}"}
    ).json["runs"]
    assert "instances" not in run["deliveries"][0]
    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    text = client.get(f"/ui/triggers/{trigger}/run", query_string={"t": run["scheduledTime"]}).text
    assert 'data-testid="started-none"' in text and 'data-testid="started"' not in text
