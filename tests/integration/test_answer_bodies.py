"""Resource and Operation answers over HTTP, from rows stored in Postgres, are the fixed JSON of
tests/unit/test_answer_schemas.py (docs/spec/http-api.md#api-op, docs/spec/http-api.md#api-res):
the same keys in the same order and the same values, for every Operation kind and state (an error
with details, a check with progress, each effect) and every resource Form, through the database
(JSON text and timestamp columns) and the app's JSON provider."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from models import db as models_db
from tests.integration.test_resources_support import headers
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
