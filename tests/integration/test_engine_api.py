"""Instances over HTTP (docs/spec/http-api.md#api-inst) through the Flask app: shapes, errors, paging, idempotent
events, and ids that must round-trip through every call (API-inst-id)."""

from __future__ import annotations

import urllib.parse
import uuid

import pytest

from tests.support import workflows

WAITER = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""

NASTY_IDS = [
    "a/b",
    "%",
    "%2F",
    "?x=1&y=2",
    " spaced out ",
    "\U0001f600",
    "nul\x00byte",
    "a//b",
    "/lead",
    "trail/",
    ".",
    "..",
    "#frag",
    "events",
    "x/events",
    "x/history",
    "line\u2028sep",
    "\U0001f600" * 256,
    "+plus+",
    "semi;colon",
    "back\\slash",
    "ümlaut",
    "%FF",
    "tab\tnew\nline",
]


def enc(instance_id: str) -> str:
    """Percent-encode an id as ONE path segment (dots too, so no client normalises them)."""
    return urllib.parse.quote(instance_id, safe="").replace(".", "%2E")


@pytest.fixture()
def api(client, space_token, db_url):
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    headers = {"Authorization": f"Bearer {token}"}

    class Api:
        def __init__(self):
            self.base, self.headers, self.space, self.deployed = base, headers, space, deployed

        def call(self, method, path="", **kwargs):
            kwargs.setdefault("headers", {})
            kwargs["headers"] = {**headers, **kwargs["headers"]}
            return client.open(base + path, method=method, **kwargs)

    return Api()


def _error(response):
    return response.status_code, response.get_json()["error"]["code"]


def test_create_get_list_shapes(api):
    created = api.call("POST", json={"id": "order-1", "params": {"n": 1}})
    assert created.status_code == 201 and created.get_json() == {"id": "order-1"}
    generated = api.call("POST", json={})
    assert generated.status_code == 201 and generated.get_json()["id"] not in ("", "order-1")
    no_body = api.call("POST")
    assert no_body.status_code == 201
    got = api.call("GET", "/order-1")
    assert got.status_code == 200 and got.get_json()["id"] == "order-1"
    assert got.get_json()["status"] in ("queued", "running", "waiting")
    listed = api.call("GET").get_json()
    assert [i["id"] for i in listed["instances"]][0] == "order-1" and len(listed["instances"]) == 3
    assert set(listed["instances"][0]) == {"id", "status", "createdAt"}


def test_API_01_a_retained_id_is_instance_exists(api):
    assert api.call("POST", json={"id": "dup"}).status_code == 201
    assert _error(api.call("POST", json={"id": "dup"})) == (409, "instance_exists")


def test_API_06_unknown_keys_null_params_and_bad_types_are_rejected_before_side_effects(api):
    assert _error(api.call("POST", json={"id": "x", "params": {}, "extra": 1})) == (400, "invalid_request")
    assert _error(api.call("POST", json={"id": "y", "params": None})) == (400, "invalid_params")
    assert _error(api.call("POST", json={"id": "z", "params": [1, 2]})) == (400, "invalid_params")
    assert _error(api.call("POST", json={"id": ""})) == (400, "invalid_request")
    assert _error(api.call("POST", json={"id": 5})) == (400, "invalid_request")
    assert _error(api.call("POST", json={"id": "x" * 257})) == (400, "invalid_request")
    assert _error(api.call("POST", json=[1])) == (400, "invalid_request")
    assert api.call("GET").get_json() == {"instances": []}
    assert api.call("POST", json={"id": "target"}).status_code == 201
    for body in (
        {"type": "t", "payload": {}, "ts": 1},
        {"type": "t" * 257},
        {"type": ""},
        {"payload": {}},
        {"type": 1},
    ):
        assert _error(api.call("POST", "/target/events", json=body))[0] == 400, body
    assert _error(api.call("POST", "/target/events", json={"type": "t", "payload": None})) == (
        400,
        "invalid_params",
    )
    assert api.call("GET", "/target/events").get_json() == {"events": []}
    assert api.call("POST", "/target/events", json={"type": "t" * 256}).status_code == 202


def test_DOC_08_duplicate_keys_in_an_event_body_are_invalid_json(api):
    assert api.call("POST", json={"id": "d"}).status_code == 201
    raw = '{"type":"t","type":"u"}'
    response = api.call("POST", "/d/events", data=raw, content_type="application/json")
    assert _error(response) == (400, "invalid_json")
    assert api.call("GET", "/d/events").get_json() == {"events": []}


def test_events_post_and_inbox(api):
    api.call("POST", json={"id": "e"})
    assert api.call("POST", "/e/events", json={"type": "a", "payload": {"k": [1, 2]}}).status_code == 202
    answer = api.call("POST", "/e/events", json={"type": "b"})
    assert answer.status_code == 202 and answer.get_json() == {}
    events = api.call("GET", "/e/events").get_json()["events"]
    assert [(e["sequence"], e["type"]) for e in events] == [(1, "a"), (2, "b")]
    assert events[0]["payload"] == {"k": [1, 2]} and "payload" not in events[1]


def test_idempotent_send_event_queues_once_and_refuses_a_different_request(api):
    api.call("POST", json={"id": "idem"})
    headers = {"Idempotency-Key": "key-1"}
    first = api.call("POST", "/idem/events", json={"type": "t"}, headers=headers)
    again = api.call("POST", "/idem/events", json={"type": "t"}, headers=headers)
    assert first.status_code == again.status_code == 202 and first.get_json() == again.get_json()
    assert len(api.call("GET", "/idem/events").get_json()["events"]) == 1
    other = api.call("POST", "/idem/events", json={"type": "u"}, headers=headers)
    assert _error(other) == (422, "idempotency_key_reused")


def test_unknown_instance_unknown_workflow_and_other_space(api, client, db_url):
    assert _error(api.call("GET", "/missing")) == (404, "unknown_instance")
    assert _error(api.call("POST", "/missing/events", json={"type": "t"})) == (404, "unknown_instance")
    wrong = api.base.replace(api.deployed.workflow, "no-such-workflow")
    assert _error(client.get(wrong, headers=api.headers)) == (404, "not_found")
    other_space = api.base.replace(f"/spaces/{api.space}/", "/spaces/someone-else/")
    assert _error(client.get(other_space, headers=api.headers)) == (404, "not_found")
    assert _error(client.get(api.base)) == (401, "unauthenticated")
    assert _error(api.call("GET", "/bad%FFutf8")) == (400, "invalid_request")
    assert _error(api.call("DELETE", "/x")) == (405, "method_not_allowed")


def test_list_filters_and_pages(api):
    for i in range(5):
        api.call("POST", json={"id": f"p{i}"})
    page = api.call("GET", query_string={"limit": "2"}).get_json()
    seen = [i["id"] for i in page["instances"]]
    while "nextPageToken" in page:
        page = api.call("GET", query_string={"limit": "2", "pageToken": page["nextPageToken"]}).get_json()
        seen += [i["id"] for i in page["instances"]]
    assert seen == [f"p{i}" for i in range(5)]
    assert api.call("GET", query_string={"status": "complete"}).get_json() == {"instances": []}
    assert _error(api.call("GET", query_string={"status": "bogus"})) == (400, "invalid_request")
    assert _error(api.call("GET", query_string={"pageToken": "garbage"})) == (400, "invalid_request")
    assert _error(api.call("GET", query_string={"limit": "0"})) == (400, "invalid_request")


def test_history_pages_oldest_first(api):
    api.call("POST", json={"id": "h"})
    for i in range(5):
        api.call("POST", "/h/events", json={"type": f"t{i}"})
    page = api.call("GET", "/h/history", query_string={"limit": "2"}).get_json()
    events = list(page["events"])
    while "nextPageToken" in page:
        page = api.call(
            "GET", "/h/history", query_string={"limit": "2", "pageToken": page["nextPageToken"]}
        ).get_json()
        events += page["events"]
    assert [e["eventId"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["eventType"] == "InstanceCreated"
    assert [e["attributes"]["type"] for e in events if e["eventType"] == "EventAccepted"] == [
        f"t{i}" for i in range(5)
    ]
    assert set(events[0]) == {"eventId", "eventTimestamp", "eventType", "attributes"}


def test_terminate_over_http(api):
    api.call("POST", json={"id": "t"})
    answer = api.call("POST", "/t/terminate")
    assert answer.status_code == 200 and answer.get_json() == {"status": "terminated"}
    assert api.call("GET", "/t").get_json() == {"id": "t", "status": "terminated"}
    assert api.call("POST", "/t/terminate").get_json() == {"status": "terminated"}
    assert _error(api.call("POST", "/t/events", json={"type": "x"})) == (409, "instance_terminal")


@pytest.mark.parametrize("instance_id", NASTY_IDS, ids=range(len(NASTY_IDS)))
def test_any_valid_id_round_trips_through_every_call(api, instance_id):
    path = "/" + enc(instance_id)
    created = api.call("POST", json={"id": instance_id})
    assert created.status_code == 201, created.get_json()
    assert created.get_json() == {"id": instance_id}
    assert api.call("GET", path).get_json()["id"] == instance_id
    assert instance_id in [i["id"] for i in api.call("GET").get_json()["instances"]]
    assert api.call("POST", path + "/events", json={"type": instance_id}).status_code == 202
    assert api.call("GET", path + "/events").get_json()["events"][0]["type"] == instance_id
    history = api.call("GET", path + "/history").get_json()["events"]
    assert history[0]["attributes"] == {"instanceId": instance_id}
    assert api.call("POST", path + "/terminate").get_json() == {"status": "terminated"}
    assert api.call("GET", path).get_json() == {"id": instance_id, "status": "terminated"}


@pytest.mark.parametrize(
    "raw, code",
    [
        ('{"params":{"k":"\\ud800"}}', "invalid_json"),  # DOC-06: lone surrogates never become U+FFFD
        ('{"params":{"k":"\\udc00\\ud83d"}}', "invalid_json"),
        ('{"params":{"a":NaN}}', "invalid_json"),  # DOC-07
        ('{"params":{"a":Infinity}}', "invalid_json"),
        ('{"params":{"a":-Infinity}}', "invalid_json"),
        ('{"params":{"a":1e400}}', None),  # overflow: invalid_json or invalid_params, never stored
        ('{"params":{"qty":1,"qty":-1}}', "invalid_json"),  # DOC-08
    ],
)
def test_DOC_06_07_08_bad_json_bodies_create_nothing(api, raw, code):
    response = api.call("POST", data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] in ((code,) if code else ("invalid_json", "invalid_params"))
    assert api.call("GET").get_json() == {"instances": []}


def test_DOC_06_control_an_escaped_pair_is_stored_as_the_real_character(api):
    response = api.call(
        "POST", data='{"id":"e","params":{"k":"\\ud83d\\ude00"}}', content_type="application/json"
    )
    assert response.status_code == 201
    history = api.call("GET", "/e/history").get_json()["events"]
    assert history[0]["eventType"] == "InstanceCreated"
    import sqlalchemy as sa

    from models import db as models_db
    from models import instances as inst_models

    with models_db.session_scope() as session:
        params = session.scalar(
            sa.select(inst_models.Instance.params).where(
                inst_models.Instance.workflow_uid == api.deployed.workflow,
                inst_models.Instance.instance_id == "e",
            )
        )
    assert params == {"k": "\U0001f600"}


def test_DOC_09_payload_limit_is_exact(api):
    api.call("POST", json={"id": "big"})
    fits = {"p": "a" * 1048568}  # {"p":"a…"} is exactly 1048576 canonical bytes
    assert (
        api.call("POST", "/big/events", json={"type": "t", "payload": fits}).status_code == 429
    )  # queue bytes
    too_big = {"p": "a" * 1048569}
    assert _error(api.call("POST", "/big/events", json={"type": "t", "payload": too_big})) == (
        413,
        "document_too_large",
    )


@pytest.mark.parametrize(
    "limit", ["\u00b2", "\u0661", "\u0663\u0660", "1.0", "+5", " 5", "0", "1001", "-1", "99999"]
)
def test_limit_must_be_ascii_digits_1_to_1000(api, limit):
    api.call("POST", json={"id": "l"})
    for path in ("", "/l/history"):
        response = api.call("GET", path, query_string={"limit": limit})
        assert _error(response) == (400, "invalid_request"), (path, limit, response.get_json())
    assert api.call("GET", "", query_string={"limit": "1000"}).status_code == 200


def _token(value: dict | str) -> str:
    import base64
    import json

    raw = value if isinstance(value, str) else json.dumps(value)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        _token({"after": 9223372036854775808}),
        _token({"after": 2**70}),
        _token({"after": -1}),
        _token({"after": 1.5}),
        _token({"after": True}),
        _token({"after": 1, "x": 2}),
        _token({"after": "1"}),
        _token("[1]"),
        _token('{"after":1}') + "==",
        "not base64!",
        "\u00e9t\u00e9",
    ],
)
def test_a_page_token_the_api_did_not_issue_is_invalid_request(api, token):
    api.call("POST", json={"id": "p"})
    assert _error(api.call("GET", "", query_string={"pageToken": token})) == (400, "invalid_request")
    assert _error(api.call("GET", "/p/history", query_string={"pageToken": token})) == (
        400,
        "invalid_request",
    )


def test_history_page_token_beyond_an_event_id_is_invalid_request(api):
    api.call("POST", json={"id": "h"})
    big = _token({"after": 2**31})
    assert _error(api.call("GET", "/h/history", query_string={"pageToken": big})) == (400, "invalid_request")
    assert api.call("GET", "", query_string={"pageToken": big}).get_json() == {"instances": []}


@pytest.mark.parametrize("raw", ["null", "[]", "1", '"x"', "true"])
def test_create_body_root_must_be_an_object(api, raw):
    assert _error(api.call("POST", data=raw, content_type="application/json")) == (400, "invalid_request")
    assert api.call("GET").get_json() == {"instances": []}


@pytest.mark.parametrize("raw", ['{"x":1}', "[]", "null", "1", '{"reason":"x"}'])
def test_terminate_takes_no_body_or_an_empty_object(api, raw):
    api.call("POST", json={"id": "k"})
    response = api.call("POST", "/k/terminate", data=raw, content_type="application/json")
    assert _error(response) == (400, "invalid_request")
    assert api.call("GET", "/k").get_json()["status"] != "terminated"
    answer = api.call("POST", "/k/terminate", data="{}", content_type="application/json")
    assert answer.status_code == 200 and answer.get_json() == {"status": "terminated"}


@pytest.mark.parametrize("uid", ["%00", "not-a-uid", "%E2%80%A8", "00000000-0000-0000-0000-00000000000%00"])
def test_a_workflow_uid_the_host_never_issued_is_not_found(client, space_token, uid):
    space, token = space_token
    headers = {"Authorization": f"Bearer {token}"}
    for method, path in (
        ("GET", ""),
        ("POST", ""),
        ("GET", "/x"),
        ("POST", "/x/terminate"),
        ("GET", "/x/history"),
    ):
        response = client.open(
            f"/v2/spaces/{space}/resources/{uid}/instances{path}", method=method, headers=headers
        )
        assert (response.status_code, response.get_json()["error"]["code"]) == (404, "not_found"), (
            method,
            path,
        )


def test_a_create_that_is_refused_leaves_no_instance(api, client, db_url):
    """The create sends its insert with the workflow's lock before it knows whether the UID is a
    live, ready DurableWorkflow of the caller's Space: every refusal rolls it back."""
    import sqlalchemy as sa

    from models import db as models_db
    from services import tokens

    def rows() -> int:
        with models_db.session_scope(db_url) as session:
            return session.scalar(sa.text("SELECT count(*) FROM instances"))

    before = rows()
    # a real workflow of another Space, named by a caller of its own Space
    other_space = "s" + uuid.uuid4().hex[:12]
    with models_db.session_scope(db_url) as session:
        other_token = tokens.create_token_txn(session, space=other_space)
    path = f"/v2/spaces/{other_space}/resources/{api.deployed.workflow}/instances"
    refused = client.post(path, json={"id": "theirs"}, headers={"Authorization": f"Bearer {other_token}"})
    assert _error(refused) == (404, "not_found")
    # a workflow UID that is not a DurableWorkflow (the Version's) and one that does not exist
    for uid in (api.deployed.version, str(uuid.uuid4())):
        base = api.base.replace(api.deployed.workflow, uid)
        assert _error(client.post(base, json={"id": "x"}, headers=api.headers)) == (404, "not_found")
    # an existing id: instance_exists, and the first one stays as it was
    assert api.call("POST", json={"id": "kept"}).status_code == 201
    assert _error(api.call("POST", json={"id": "kept"})) == (409, "instance_exists")
    assert rows() == before + 1
