"""Resource and Operation answers over HTTP, from rows stored in Postgres, are the fixed JSON of
tests/unit/test_answer_schemas.py (docs/spec/http-api.md#api-op, docs/spec/http-api.md#api-res):
the same keys in the same order and the same values, for every Operation kind and state (an error
with details, a check with progress, each effect) and every resource Form, through the database
(JSON text and timestamp columns) and the app's JSON provider."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
import sqlalchemy as sa

from models import cron as cron_models
from models import db as models_db
from models import instances as inst_models
from services import instance_bindings
from tests.integration.test_resources_support import headers
from tests.support import workflows
from tests.unit.test_answer_schemas import OPERATIONS, RESOURCES

pytestmark = pytest.mark.usefixtures("no_dispatch")


def _copy(row, **changes):
    """A new transient row with ``row``'s column values and ``changes`` (the golden rows stay transient)."""
    mapper = sa.inspect(type(row))
    values = {attr.key: getattr(row, attr.key) for attr in mapper.column_attrs}
    values.update(changes)
    return type(row)(**values)


def _answer(response) -> str:
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.dumps(response.get_json())  # get_json keeps the wire order


def _store(db_url: str, *rows) -> None:
    with models_db.session_scope(db_url) as session:
        for row in rows:
            session.add(row)
            session.flush()


@pytest.mark.parametrize("golden, expected", RESOURCES)
def test_a_stored_resource_answers_its_fixed_json(client, db_url, space_token, golden, expected):
    space, token = space_token
    uid = str(uuid.uuid4())
    _store(db_url, _copy(golden, uid=uid, space=space))
    answer = _answer(client.get(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, None)))
    assert answer == expected.replace('"uid": "res-1"', f'"uid": "{uid}"', 1)


def test_the_resource_list_answers_the_fixed_json_of_each(client, db_url, space_token):
    space, token = space_token
    uids = sorted(str(uuid.uuid4()) for _ in RESOURCES)  # one createdAt: listed by uid
    _store(db_url, *(
        _copy(param.values[0], uid=uid, space=space, name=f"orders-{n}") for n, (uid, param) in
        enumerate(zip(uids, RESOURCES, strict=True))
    ))
    expected = [
        param.values[1].replace('"uid": "res-1"', f'"uid": "{uid}"', 1)
        .replace('"name": "orders"', f'"name": "orders-{n}"', 1)
        for n, (uid, param) in enumerate(zip(uids, RESOURCES, strict=True))
    ]
    url = f"/v2/spaces/{space}/resources"
    first = client.get(url, query_string={"limit": 3}, headers=headers(token, None))
    body = first.get_json()
    assert list(body) == ["resources", "nextPageToken"]
    assert [json.dumps(r) for r in body["resources"]] == expected[:3]
    rest = client.get(url, query_string={"limit": 3, "pageToken": body["nextPageToken"]}, headers=headers(token, None))
    assert _answer(rest) == f'{{"resources": [{", ".join(expected[3:])}]}}'


@pytest.mark.parametrize("golden, expected", OPERATIONS)
def test_a_stored_operation_answers_its_fixed_json(client, db_url, space_token, golden, expected):
    space, token = space_token
    uid, op_id = str(uuid.uuid4()), str(uuid.uuid4())
    resource = _copy(RESOURCES[0].values[0], uid=uid, space=space)
    _store(db_url, resource, _copy(golden, id=op_id, space=space, resource_uid=uid))
    answer = _answer(client.get(f"/v2/spaces/{space}/operations/{op_id}", headers=headers(token, None)))
    assert answer == (
        expected.replace('"id": "op-1"', f'"id": "{op_id}"', 1).replace('"resourceUid": "res-1"', f'"resourceUid": "{uid}"', 1)
    )


# --- instance answers: status, list, inbox, sendEvent, history, logs, a run's logs, a binding's status ---
#
# Rows stored with fixed values; each answer is fixed JSON text (keys in wire order, absent
# optional keys absent: ``output`` only when complete, ``error`` only when errored, ``payload``
# only when sent, ``nextPageToken`` of the list and history only when more follow).

T0 = dt.datetime(2026, 10, 5, 12, 5, 0, 123456, tzinfo=dt.UTC)
MS = "2026-10-05T12:05:00.123Z"
SOURCE = """
class K:
    def __init__(self, env): pass
    def run(self, event, step): return {}
"""
INSTANCES = [  # (id, status, output, error, the GET …/instances/{id} answer)
    ("done", "complete", {"b": 1, "a": [True, None]}, None,
     '{"id": "done", "status": "complete", "output": {"b": 1, "a": [true, null]}}'),
    ("done-empty", "complete", None, None, '{"id": "done-empty", "status": "complete"}'),
    ("failed", "errored", None, {"reason": "run_threw", "message": "boom"},
     '{"id": "failed", "status": "errored", "error": {"reason": "run_threw", "message": "boom"}}'),
    ("failed-quietly", "errored", None, {"reason": "lifetime_exceeded"},
     '{"id": "failed-quietly", "status": "errored", "error": {"reason": "lifetime_exceeded"}}'),
    ("sleeper", "sleeping", None, None, '{"id": "sleeper", "status": "sleeping"}'),
]


@pytest.fixture()
def stored_instances(db_url, space_token):
    """A DurableWorkflow with the rows of :data:`INSTANCES`; ``done`` has params, a history of
    three events and three log lines (the first two gave way to the cap: seq 3..5); ``sleeper``
    has two queued events (one without a payload)."""
    space, token = space_token
    workflow = workflows.deploy(db_url, space=space, source=SOURCE, class_name="K").workflow
    pks = {}
    with models_db.session_scope(db_url) as session:
        for instance_id, status, output, error, _ in INSTANCES:
            row = inst_models.Instance(
                workflow_uid=workflow, space=space, instance_id=instance_id, status=status, output=output,
                error=error, params={"p": 1} if instance_id == "done" else None, created_at=T0, updated_at=T0,
                lifetime_ends_at=T0, next_event_id=4 if instance_id == "done" else 1,
                next_sequence=3 if instance_id == "sleeper" else 1,
            )
            session.add(row)
            session.flush()
            pks[instance_id] = row.pk
        for event_id, event_type, attributes in [
            (1, "InstanceCreated", {"id": "done"}), (2, "StepCompleted", {"name": "s"}), (3, "InstanceCompleted", {}),
        ]:
            session.add(inst_models.HistoryEvent(
                instance_pk=pks["done"], event_id=event_id, event_type=event_type, attributes=attributes,
                event_timestamp=T0,
            ))
        for sequence, event_type, payload in [(1, "a", {"k": 1}), (2, "b", None)]:
            session.add(inst_models.InboxEvent(
                instance_pk=pks["sleeper"], sequence=sequence, type=event_type, payload=payload, canonical_bytes=10,
                accepted_at=T0,
            ))
        for seq, epoch, step, attempt, stream, message, replayed in [
            (3, 1, b"s", 1, "stdout", "one", False), (4, 1, None, None, "host", "two", True),
            (5, None, None, None, "stderr", "three", False),
        ]:
            session.execute(sa.text(
                "INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, step, attempt, stream, message, replayed)"
                " VALUES (:pk, :seq, :at, :epoch, :step, :attempt, :stream, :message, :replayed)"
            ), {"pk": pks["done"], "seq": seq, "at": T0, "epoch": epoch, "step": step, "attempt": attempt,
                "stream": stream, "message": message, "replayed": replayed})
    return space, token, workflow


def _instances_url(space: str, workflow: str) -> str:
    return f"/v2/spaces/{space}/resources/{workflow}/instances"


@pytest.mark.parametrize("instance_id, expected", [(i[0], i[4]) for i in INSTANCES])
def test_an_instance_answers_its_fixed_json(client, stored_instances, instance_id, expected):
    space, token, workflow = stored_instances
    answer = _answer(client.get(f"{_instances_url(space, workflow)}/{instance_id}", headers=headers(token, None)))
    assert answer == expected


def test_a_bindings_status_answers_its_fixed_json(stored_instances):
    space, _, workflow = stored_instances
    for instance_id, _, _, _, expected in INSTANCES:
        answer = instance_bindings.call_binding(space=space, workflow_uid=workflow, call="status", args={"id": instance_id})
        assert json.dumps(answer) == expected.replace(f'"id": "{instance_id}", ', "", 1)


def test_the_instance_list_answers_fixed_json(client, stored_instances):
    space, token, workflow = stored_instances
    url = _instances_url(space, workflow)
    rows = [f'{{"id": "{i[0]}", "status": "{i[1]}", "createdAt": "{MS}"}}' for i in INSTANCES]
    first = client.get(url, query_string={"limit": 2}, headers=headers(token, None)).get_json()
    page_token = first["nextPageToken"]
    assert json.dumps(first) == f'{{"instances": [{", ".join(rows[:2])}], "nextPageToken": "{page_token}"}}'
    rest = client.get(url, query_string={"pageToken": page_token}, headers=headers(token, None))
    assert _answer(rest) == f'{{"instances": [{", ".join(rows[2:])}]}}'
    empty = client.get(url, query_string={"status": "waiting"}, headers=headers(token, None))
    assert _answer(empty) == '{"instances": []}'


def test_the_inbox_and_send_event_answer_fixed_json(client, stored_instances):
    space, token, workflow = stored_instances
    url = f"{_instances_url(space, workflow)}/sleeper/events"
    assert _answer(client.get(url, headers=headers(token, None))) == (
        f'{{"events": [{{"sequence": 1, "type": "a", "payload": {{"k": 1}}, "acceptedAt": "{MS}"}}, '
        f'{{"sequence": 2, "type": "b", "acceptedAt": "{MS}"}}]}}'
    )
    assert _answer(client.get(f"{_instances_url(space, workflow)}/done/events", headers=headers(token, None))) == (
        '{"events": []}'
    )
    for key in (None, "k-1", "k-1"):  # the second "k-1" replays the stored answer
        sent = client.post(url, json={"type": "c"}, headers=headers(token, key))
        assert sent.status_code == 202, sent.get_data(as_text=True)
        assert json.dumps(sent.get_json()) == "{}"


def test_the_history_answers_fixed_json(client, stored_instances):
    space, token, workflow = stored_instances
    url = f"{_instances_url(space, workflow)}/done/history"
    events = [
        f'{{"eventId": 1, "eventTimestamp": "{MS}", "eventType": "InstanceCreated", '
        '"attributes": {"id": "done", "params": {"p": 1}}}',
        f'{{"eventId": 2, "eventTimestamp": "{MS}", "eventType": "StepCompleted", "attributes": {{"name": "s"}}}}',
        f'{{"eventId": 3, "eventTimestamp": "{MS}", "eventType": "InstanceCompleted", "attributes": {{}}}}',
    ]
    first = client.get(url, query_string={"limit": 2}, headers=headers(token, None)).get_json()
    page_token = first["nextPageToken"]
    assert json.dumps(first) == f'{{"events": [{", ".join(events[:2])}], "nextPageToken": "{page_token}"}}'
    rest = client.get(url, query_string={"pageToken": page_token}, headers=headers(token, None))
    assert _answer(rest) == f'{{"events": [{events[2]}]}}'
    none = client.get(f"{_instances_url(space, workflow)}/sleeper/history", headers=headers(token, None))
    assert _answer(none) == '{"events": []}'


def test_the_instance_logs_answer_fixed_json(client, stored_instances):
    space, token, workflow = stored_instances
    url = f"{_instances_url(space, workflow)}/done/logs"
    lines = [
        f'{{"time": "{MS}", "epoch": 1, "step": "s", "attempt": 1, "stream": "stdout", "message": "one", "replayed": false}}',
        f'{{"time": "{MS}", "epoch": 1, "step": null, "attempt": null, "stream": "host", "message": "two", "replayed": true}}',
        f'{{"time": "{MS}", "epoch": null, "step": null, "attempt": null, "stream": "stderr", "message": "three", '
        '"replayed": false}',
    ]
    first = client.get(url, query_string={"limit": 2}, headers=headers(token, None)).get_json()
    page_token = first["nextPageToken"]
    assert json.dumps(first) == f'{{"logs": [{", ".join(lines[:2])}], "nextPageToken": "{page_token}", "removedLines": 2}}'
    rest = client.get(url, query_string={"pageToken": page_token}, headers=headers(token, None)).get_json()
    last_token = rest["nextPageToken"]
    assert json.dumps(rest) == f'{{"logs": [{lines[2]}], "nextPageToken": "{last_token}", "removedLines": 2}}'
    after = client.get(url, query_string={"pageToken": last_token}, headers=headers(token, None))
    assert _answer(after) == f'{{"logs": [], "nextPageToken": "{last_token}", "removedLines": 2}}'
    none = client.get(f"{_instances_url(space, workflow)}/sleeper/logs", headers=headers(token, None)).get_json()
    assert json.dumps(none) == f'{{"logs": [], "nextPageToken": "{none["nextPageToken"]}", "removedLines": 0}}'


def test_a_runs_logs_answer_fixed_json(client, db_url, stored_instances):
    space, token, _ = stored_instances
    uid = str(uuid.uuid4())
    scheduled = dt.datetime(2026, 3, 4, 10, 5, tzinfo=dt.UTC)
    with models_db.session_scope(db_url) as session:
        session.add(_copy(RESOURCES[4].values[0], uid=uid, space=space))
        match = cron_models.CronMatch(trigger_uid=uid, space=space, worker_uid="w", cron="5 10 * * *",
                                      scheduled_time=scheduled, recorded_at=T0, state="done")
        session.add(match)
        session.flush()
        for n, (seqs, stream) in enumerate([((2, 3), "stdout"), ((1,), "stderr")]):
            delivery = cron_models.CronDelivery(match_pk=match.pk, started_at=T0 + dt.timedelta(seconds=n))
            session.add(delivery)
            session.flush()
            for seq in seqs:
                session.execute(sa.text(
                    "INSERT INTO tenant_logs (delivery_pk, seq, logged_at, stream, message)"
                    " VALUES (:pk, :seq, :at, :stream, :message)"
                ), {"pk": delivery.pk, "seq": seq, "at": T0, "stream": stream, "message": f"line {n}.{seq}"})
    url = f"/v2/spaces/{space}/resources/{uid}/runs/2026-03-04T10:05:00Z/logs"
    lines = [
        f'{{"time": "{MS}", "delivery": 1, "stream": "stdout", "message": "line 0.2"}}',
        f'{{"time": "{MS}", "delivery": 1, "stream": "stdout", "message": "line 0.3"}}',
        f'{{"time": "{MS}", "delivery": 2, "stream": "stderr", "message": "line 1.1"}}',
    ]
    first = client.get(url, query_string={"limit": 2}, headers=headers(token, None)).get_json()
    page_token = first["nextPageToken"]
    assert json.dumps(first) == f'{{"logs": [{", ".join(lines[:2])}], "nextPageToken": "{page_token}", "removedLines": 1}}'
    rest = client.get(url, query_string={"pageToken": page_token}, headers=headers(token, None)).get_json()
    assert json.dumps(rest) == (
        f'{{"logs": [{lines[2]}], "nextPageToken": "{rest["nextPageToken"]}", "removedLines": 0}}'
    )


def test_the_progress_answers_fixed_json(client, stored_instances):
    space, token, workflow = stored_instances
    url = _instances_url(space, workflow)
    done = client.get(f"{url}/done/progress", headers=headers(token, None))
    assert _answer(done) == '{"status": "complete", "activity": "finished"}'
    # no pending step and no replay context yet: the next context is due
    sleeper = client.get(f"{url}/sleeper/progress", headers=headers(token, None))
    assert _answer(sleeper) == '{"status": "sleeping", "activity": "starting"}'
