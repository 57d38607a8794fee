"""Regressions found by adversarial testing: each input used to crash (500), change data or answer
with HTML; each is now the §2.4 JSON envelope with the right code (docs/spec/http-api.md, API-json, API-op).

In-process (Flask test client) tests; the gunicorn-level ones are ``tests/e2e/test_api_hardening.py``.
"""

from __future__ import annotations

import base64
import io
import json
import uuid

import flask
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.test_resources_support import (
    FORMS,
    create_ok,
    headers,
    name,
    version_spec,
)

pytestmark = pytest.mark.usefixtures("no_dispatch")

MAX_BODY = 16 * 1024 * 1024


def _error(response, status: int, code: str) -> dict:
    """Assert the §2.4 envelope with ``status``/``code``; returns the error object."""
    assert response.status_code == status, (response.status_code, response.get_data()[:300])
    assert response.mimetype == "application/json", response.get_data()[:300]
    error = response.get_json()["error"]
    assert error["code"] == code, error
    return error


def _names(client, space: str, token: str) -> set[str]:
    listing = client.get(f"/v2/spaces/{space}/resources?limit=500", headers=headers(token, None))
    assert listing.status_code == 200
    return {r["name"] for r in listing.get_json()["resources"]}


# --- 1. the Idempotency-Key fingerprint never fails ------------------------------------------------


@pytest.mark.parametrize("big", [2**53, -(2**53), 2**60, 10**300], ids=["2^53", "-2^53", "2^60", "1e300"])
def test_a_keyed_create_or_update_with_a_huge_integer_gets_its_validation_error(client, space_token, big):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    create = {"form": FORMS["ModuleWorker"], "name": name(), "spec": {"description": "d", "n": big}}
    _error(
        client.post(f"/v2/spaces/{space}/resources", json=create, headers=headers(token)), 400, "invalid_spec"
    )
    version = version_spec(worker, vars={"BIG": big})
    body = {"form": FORMS["WorkerVersion"], "name": name(), "spec": version}
    error = _error(
        client.post(f"/v2/spaces/{space}/resources", json=body, headers=headers(token)), 400, "invalid_spec"
    )
    assert error["details"]["pointer"] == "/spec/vars/BIG"
    put = {"spec": {"description": "d", "n": big}}
    _error(
        client.put(f"/v2/spaces/{space}/resources/{worker}", json=put, headers=headers(token)),
        400,
        "invalid_spec",
    )
    envelope = {"spec": {}, "extra": big}
    _error(
        client.put(f"/v2/spaces/{space}/resources/{worker}", json=envelope, headers=headers(token)),
        400,
        "invalid_spec",
    )


def test_a_keyed_event_with_a_huge_integer_is_not_a_500(client, space_token):
    space, token = space_token
    path = f"/v2/spaces/{space}/resources/{uuid.uuid4()}/instances/i-1/events"
    response = client.post(path, json={"type": "t", "payload": {"n": 2**64}}, headers=headers(token))
    assert response.status_code in (400, 404), response.get_data()[:300]
    assert response.get_json()["error"]["code"] in ("invalid_params", "not_found")


def test_a_keyed_request_nested_as_deep_as_the_parser_allows_is_not_a_500(client, space_token):
    space, token = space_token
    depth = 900  # json.loads accepts it; rfc8785.dumps recursed once per level (RecursionError)
    raw = (
        '{"form": "'
        + FORMS["ModuleWorker"]
        + '", "name": "deep", "spec": '
        + '{"a": ' * depth
        + "1"
        + "}" * depth
        + "}"
    )
    response = client.post(
        f"/v2/spaces/{space}/resources",
        data=raw.encode(),
        content_type="application/json",
        headers=headers(token),
    )
    _error(response, 400, "invalid_spec")


def test_canonical_json_is_rfc8785_where_rfc8785_is_defined_and_total_beyond():
    from host_api.body import canonical_json

    assert canonical_json(
        {"b": [1, 2.5, "é\n"], "a": None, "\U0001f600": True, "\uffff": False}
    ) == rfc8785.dumps({"b": [1, 2.5, "é\n"], "a": None, "\U0001f600": True, "\uffff": False})
    assert canonical_json({"n": 2**53}) == b'{"n":9007199254740992}'
    assert canonical_json({"n": 2**53 + 1}) != canonical_json({"n": 2**53})
    assert canonical_json([2**70]) != canonical_json([2**70 + 1])
    assert canonical_json({"y": 1, "x": 2**64}) == canonical_json({"x": 2**64, "y": 1})
    deep: object = 0
    for _ in range(100_000):
        deep = [deep]
    assert canonical_json(deep) == b"[" * 100_000 + b"0" + b"]" * 100_000


_SAFE = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
_JSON = st.recursive(
    st.none() | st.booleans() | _SAFE | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_canonical_json_matches_rfc8785_byte_for_byte(value):
    """Fingerprints stored before the change stay valid: same bytes wherever rfc8785 answers."""
    from host_api.body import canonical_json

    assert canonical_json(value) == rfc8785.dumps(value)


# --- 2. ids the host never issued (U+0000 included) never reach the database ----------------------


@pytest.mark.parametrize("bad", ["%00", "a%00", "%00" * 36, "nope", "7AC5F696-8CF3-43C2-9E19-E33992D44057", "%C3%A9"])
def test_path_ids_of_a_shape_the_host_never_issues_are_not_found(client, space_token, bad):
    space, token = space_token
    base = f"/v2/spaces/{space}"
    _error(client.get(f"{base}/resources/{bad}", headers=headers(token, None)), 404, "not_found")
    _error(client.put(f"{base}/resources/{bad}", json={"spec": {}}, headers=headers(token)), 404, "not_found")
    _error(client.delete(f"{base}/resources/{bad}", headers=headers(token)), 404, "not_found")
    _error(client.get(f"{base}/operations/{bad}", headers=headers(token, None)), 404, "not_found")
    _error(client.get(f"{base}/resources/{bad}/runs", headers=headers(token, None)), 404, "not_found")


@pytest.mark.parametrize("bad", ["a\u0000", "\u0000", "3c13156f-c8d5-4730-a002-4e91cb4a012\u0000"])
def test_spec_references_of_a_shape_the_host_never_issues_are_reference_not_found(client, space_token, bad):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    cases = [
        ("DurableWorkflow", {"worker": {"resourceUid": bad}, "className": "A"}, "/spec/worker/resourceUid"),
        (
            "WorkerCronTrigger",
            {"worker": {"resourceUid": bad}, "cron": "0 9 * * *"},
            "/spec/worker/resourceUid",
        ),
        ("WorkerVersion", version_spec(bad), "/spec/worker/resourceUid"),
        (
            "WorkerVersion",
            version_spec(worker, workflowBindings=[{"name": "W", "resource": {"resourceUid": bad}}]),
            "/spec/workflowBindings/0/resource/resourceUid",
        ),
        (
            "WorkerDeployment",
            {
                "worker": {"resourceUid": worker},
                "versions": [{"version": {"resourceUid": bad}, "weight": 100}],
            },
            "/spec/versions/0/version/resourceUid",
        ),
    ]
    before = _names(client, space, token)
    for form, spec, pointer in cases:
        body = {"form": FORMS[form], "name": name(), "spec": spec}
        error = _error(
            client.post(f"/v2/spaces/{space}/resources", json=body, headers=headers(token)),
            404,
            "reference_not_found",
        )
        assert error["details"]["pointer"] == pointer
    assert _names(client, space, token) == before


# --- 3. a body over the limit is 413 however it is framed ------------------------------------------


def _streamed_post(client, space: str, token: str, payload: bytes):
    """POST ``payload`` with no Content-Length on a server that terminates the stream (chunked)."""
    return client.post(
        f"/v2/spaces/{space}/resources",
        input_stream=io.BytesIO(payload),
        content_type="application/json",
        headers=headers(token),
        # What gunicorn passes for a chunked body: no usable Content-Length, a terminated stream.
        environ_overrides={"wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"},
    )


def _padded_create(res_name: str, size: int) -> bytes:
    body = json.dumps({"form": FORMS["ModuleWorker"], "name": res_name, "spec": {}}).encode()
    return body + b" " * (size - len(body))


def test_a_streamed_body_over_the_limit_is_413_and_changes_nothing(client, space_token):
    space, token = space_token
    res_name = name("big")
    # The first 16 MiB are a valid create (JSON may end in whitespace); the rest is not JSON.
    payload = _padded_create(res_name, MAX_BODY) + b"not json at all"
    _error(_streamed_post(client, space, token, payload), 413, "document_too_large")
    assert res_name not in _names(client, space, token)
    one_more = _padded_create(res_name, MAX_BODY + 1)
    _error(_streamed_post(client, space, token, one_more), 413, "document_too_large")
    assert res_name not in _names(client, space, token)


def test_a_streamed_body_at_the_limit_and_a_sized_one_over_it(client, space_token):
    space, token = space_token
    res_name = name("edge")
    accepted = _streamed_post(client, space, token, _padded_create(res_name, MAX_BODY))
    assert accepted.status_code == 202, accepted.get_data()[:300]
    sized = client.post(
        f"/v2/spaces/{space}/resources",
        data=_padded_create(name("sized"), MAX_BODY + 1),
        content_type="application/json",
        headers=headers(token),
    )
    _error(sized, 413, "document_too_large")


def test_a_body_shorter_than_its_content_length_is_invalid_request(client, space_token):
    space, token = space_token
    body = json.dumps({"form": FORMS["ModuleWorker"], "name": name(), "spec": {}}).encode()
    response = client.post(
        f"/v2/spaces/{space}/resources",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        headers=headers(token),
        environ_overrides={"CONTENT_LENGTH": str(len(body) + 10)},
    )
    _error(response, 400, "invalid_request")


@pytest.mark.parametrize("chunked", [False, True])
def test_werkzeug_readers_see_the_body_the_limited_reader_read(app, chunked):
    from host_api import body

    payload = b'{"a": null}'
    environ = {"wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"} if chunked else {}
    with app.test_request_context(
        "/x",
        method="POST",
        input_stream=io.BytesIO(payload),
        content_type="application/json",
        environ_overrides=environ,
    ):
        assert body.raw_body() == payload
        assert flask.request.get_data(cache=True) == payload
        assert body.json_body() == {"a": None}


# --- 4. page tokens and limits ------------------------------------------------------------------


def _token(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token_value",
    [
        ["9999-12-31T23:59:59-23:59", str(uuid.uuid4())],
        ["0001-01-01T00:00:00+23:59", str(uuid.uuid4())],
        ["2020-01-01T00:00:00+00:00", "a\u0000"],
        ["2020-01-01T00:00:00+00:00", "x"],
        ["2020-01-01T00:00:00", str(uuid.uuid4())],
        ["2020-01-01T00:00:00.000000+00:00", str(uuid.uuid4())],
        ["2020-01-01T01:00:00+01:00", str(uuid.uuid4())],
        [1, 2],
        {"after": 1},
    ],
    ids=range(9),
)
def test_page_tokens_the_api_did_not_issue_are_invalid_request(client, space_token, token_value):
    space, token = space_token
    response = client.get(
        f"/v2/spaces/{space}/resources",
        query_string={"pageToken": _token(token_value)},
        headers=headers(token, None),
    )
    _error(response, 400, "invalid_request")


@pytest.mark.parametrize("raw", ["", "garbage!", "=" * 8, "\u00e9", "A" * 2000])
def test_garbage_page_tokens_are_invalid_request(client, space_token, raw):
    space, token = space_token
    response = client.get(
        f"/v2/spaces/{space}/resources", query_string={"pageToken": raw}, headers=headers(token, None)
    )
    _error(response, 400, "invalid_request")


def test_an_issued_page_token_still_pages(client, space_token):
    space, token = space_token
    made = [create_ok(client, space, token, "ModuleWorker", {}) for _ in range(3)]
    first = client.get(f"/v2/spaces/{space}/resources?limit=2", headers=headers(token, None)).get_json()
    second = client.get(
        f"/v2/spaces/{space}/resources",
        query_string={"limit": "2", "pageToken": first["nextPageToken"]},
        headers=headers(token, None),
    ).get_json()
    assert [r["uid"] for r in first["resources"] + second["resources"]] == made


@pytest.mark.parametrize(
    "limit", ["0", "501", "x", "", "-1", "+5", " 5", "5 ", "1_0", "\u0663", "\u00b2", "1e2"]
)
def test_bad_limits_are_invalid_request(client, space_token, limit):
    space, token = space_token
    response = client.get(
        f"/v2/spaces/{space}/resources", query_string={"limit": limit}, headers=headers(token, None)
    )
    _error(response, 400, "invalid_request")


# --- 5. deeply nested vars ------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [513, 700, 900])
def test_vars_nested_beyond_the_document_depth_are_invalid_spec_with_a_pointer(client, space_token, depth):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    value: object = 1
    for _ in range(depth - 1):  # the vars object itself is level 1
        value = {"k": value}
    body = {"form": FORMS["WorkerVersion"], "name": name(), "spec": version_spec(worker, vars={"A": value})}
    error = _error(
        client.post(f"/v2/spaces/{space}/resources", json=body, headers=headers(token)), 400, "invalid_spec"
    )
    assert error["details"]["pointer"].startswith("/spec/vars/A/k/k/")
    assert "nesting deeper than 512" in error["message"]


def test_a_shallow_vars_error_keeps_its_exact_pointer(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    spec = version_spec(worker, vars={"A": {"b/c": [0, {"~d": 2**60}]}})
    body = {"form": FORMS["WorkerVersion"], "name": name(), "spec": spec}
    error = _error(
        client.post(f"/v2/spaces/{space}/resources", json=body, headers=headers(token)), 400, "invalid_spec"
    )
    assert error["details"]["pointer"] == "/spec/vars/A/b~1c/1/~0d"


# --- 6. no HTML, ever -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v2//spaces/{space}/resources",
        "/v2/spaces//{space}/resources",
        "/v2/spaces/{space}//resources",
        "/v2/spaces/{space}/resources/",
        "//v2/spaces/{space}/resources",
        "/v2/spaces/{space}/operations//x",
    ],
)
def test_merged_slashes_and_trailing_slashes_are_json_404_not_redirects(client, space_token, path):
    space, token = space_token
    response = client.get(path.format(space=space), headers=headers(token, None))
    _error(response, 404, "not_found")
    assert "Location" not in response.headers


def test_any_non_json_error_response_becomes_the_envelope(db_url, space_token):
    from host_api.app import create_app

    space, token = space_token
    app = create_app()
    app.add_url_rule("/v2/spaces/<space>/slash/", "slash", lambda space: "ok")
    app.add_url_rule("/v2/spaces/<space>/html", "html", lambda space: flask.Response("<h1>x</h1>", 502))
    client = app.test_client()
    redirect = client.get(f"/v2/spaces/{space}/slash", headers=headers(token, None))
    _error(redirect, 404, "not_found")
    assert "Location" not in redirect.headers
    _error(client.get(f"/v2/spaces/{space}/html", headers=headers(token, None)), 502, "internal_error")


# --- 7. 405 carries Allow -------------------------------------------------------------------------


def test_405_answers_with_an_allow_header(client, space_token):
    space, token = space_token
    base = f"/v2/spaces/{space}"
    cases = [
        ("PATCH", f"{base}/resources", {"GET", "POST"}),
        ("PATCH", f"{base}/resources/{uuid.uuid4()}", {"GET", "PUT", "DELETE"}),
        ("POST", f"{base}/operations/{uuid.uuid4()}", {"GET"}),
    ]
    for method, path, expected in cases:
        response = client.open(path, method=method, headers=headers(token))
        _error(response, 405, "method_not_allowed")
        allowed = {m.strip() for m in response.headers["Allow"].split(",")}
        assert expected <= allowed and method not in allowed, allowed


def test_the_raw_route_helper_builds_a_405_with_allow(app):
    from host_api import errors

    with app.test_request_context("/x", method="PUT"):
        exc = errors.method_not_allowed(["POST", "GET"])
        response = app.handle_user_exception(exc)
    assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD, POST"


# --- 8. the OpenAPI document states the limits the API enforces -----------------------------------


def test_openapi_states_the_real_limits(client, space_token):
    from host_api import openapi
    from services import ids

    doc = openapi.document()
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    listing = {p["name"]: p for p in paths["/v2/spaces/{space}/resources"]["get"]["parameters"]}
    assert listing["limit"]["schema"]["minimum"] == 1 and listing["limit"]["schema"]["maximum"] == 500
    item = paths["/v2/spaces/{space}/resources/{uid}"]["parameters"]
    uid = next(p for p in item if p["name"] == "uid")
    assert uid["schema"]["pattern"] == ids.HOST_ID_PATTERN
    instance = paths["/v2/spaces/{space}/resources/{uid}/instances/{instance_id}"]["parameters"]
    instance_id = next(p for p in instance if p["name"] == "instance_id")
    assert (instance_id["schema"]["minLength"], instance_id["schema"]["maxLength"]) == (1, 256)
    event_type = schemas["EventBody"]["properties"]["type"]
    assert (event_type["minLength"], event_type["maxLength"]) == (1, 256)
    new_id = schemas["InstanceCreateBody"]["properties"]["id"]
    assert (new_id["minLength"], new_id["maxLength"]) == (1, 256)
    resource_name = schemas["CreateResourceBody"]["properties"]["name"]
    assert resource_name["maxLength"] == 63 and resource_name["pattern"].startswith("^[a-z0-9]")
    weight = schemas["DeploymentEntry"]["properties"]["weight"]
    assert (weight["minimum"], weight["maximum"]) == (1, 100)
    history = paths["/v2/spaces/{space}/resources/{uid}/instances/{instance_id}/history"]["get"]
    assert {p["name"] for p in history["parameters"]} >= {"pageToken", "limit"}
    # The documented bounds are the enforced ones.
    space, token = space_token
    maximum = listing["limit"]["schema"]["maximum"]
    ok = client.get(f"/v2/spaces/{space}/resources?limit={maximum}", headers=headers(token, None))
    assert ok.status_code == 200
    over = client.get(f"/v2/spaces/{space}/resources?limit={maximum + 1}", headers=headers(token, None))
    _error(over, 400, "invalid_request")
    codes = listing_codes = paths["/v2/spaces/{space}/resources"]["get"]["responses"]["400"]["description"]
    assert "invalid_request" in codes and "invalid_params" not in listing_codes
