"""``OPTIONS`` on any route answers the §2.4 JSON envelope like every other method the API does not
serve (docs/spec/host-features.md#hf-isolation): ``405 method_not_allowed`` with ``Allow`` on the URL-map routes, never
Flask's automatic empty ``200``; ``401`` without a token; ``404`` on no route."""

from __future__ import annotations

import uuid

import pytest

UID = str(uuid.uuid4())


def _json_error(response) -> dict:
    assert response.mimetype == "application/json", (response.status_code, response.data[:200])
    error = response.get_json()["error"]
    assert error["code"] and error["message"]
    return error


@pytest.mark.parametrize("path, allowed", [
    ("/healthz", {"GET", "HEAD"}),
    ("/v2/openapi.json", {"GET", "HEAD"}),
    ("/v2/spaces/{space}/resources", {"GET", "HEAD", "POST"}),
    ("/v2/spaces/{space}/resources/{uid}", {"GET", "HEAD", "PUT", "DELETE"}),
    ("/v2/spaces/{space}/operations/{uid}", {"GET", "HEAD"}),
    ("/v2/spaces/{space}/resources/{uid}/runs", {"GET", "HEAD"}),
], ids=["healthz", "openapi", "resources", "resource", "operation", "runs"])
def test_options_on_a_route_is_a_json_405_with_allow(client, space_token, path, allowed):
    space, token = space_token
    response = client.options(path.format(space=space, uid=UID), headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405
    assert _json_error(response)["code"] == "method_not_allowed"
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed


def test_options_elsewhere_is_json_too(client, space_token):
    """The raw-path instance routes, no token, no route: the envelope, never an empty 200."""
    space, token = space_token
    auth = {"Authorization": f"Bearer {token}"}
    for rest in ("", "/some-id", "/some-id/events", "/some-id/history", "/some-id/terminate"):
        response = client.options(f"/v2/spaces/{space}/resources/{UID}/instances{rest}", headers=auth)
        assert response.status_code == 405, (rest, response.status_code)
        assert _json_error(response)["code"] == "method_not_allowed"
    for path in ("/healthz", "/v2/openapi.json", f"/v2/spaces/{space}/resources", "*"):
        response = client.options(path)
        assert response.status_code == 401, (path, response.status_code)
        assert _json_error(response)["code"] == "unauthenticated"
    response = client.options("/v2/nothing-here", headers=auth)
    assert response.status_code == 404 and _json_error(response)["code"] == "not_found"
