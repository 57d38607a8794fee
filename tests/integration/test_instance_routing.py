"""The instance routes are URL-map routes (``host_api.routing``): an id's ``%2F`` stays inside its
segment all the way to the view, and the request's rule, view arguments and metrics label are
the URL map's (docs/spec/http-api.md#api-inst-id)."""

from __future__ import annotations

import flask
import pytest

from host_api import telemetry
from host_api.app import create_app
from tests.support import workflows

WAITER = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""


@pytest.fixture()
def seen(db_url):
    """An app that records, for each request, the URL-map endpoint, view arguments and route label."""
    app = create_app()
    requests: list[tuple[str | None, dict, str]] = []

    @app.after_request
    def _record(response: flask.Response) -> flask.Response:
        requests.append((flask.request.endpoint, dict(flask.request.view_args or {}), telemetry.route_template()))
        return response

    return app.test_client(), requests


def test_an_id_with_an_encoded_slash_reaches_its_instance_through_the_url_map(seen, space_token, db_url):
    client, requests = seen
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    auth = {"Authorization": f"Bearer {token}"}
    assert client.post(base, json={"id": "a/b"}, headers=auth).status_code == 201
    assert client.post(base, json={"id": "a"}, headers=auth).status_code == 201

    answer = client.get(base + "/a%2Fb", headers=auth)
    assert answer.status_code == 200 and answer.get_json()["id"] == "a/b"
    endpoint, args, label = requests[-1]
    assert endpoint == "instances.describe_instance"
    assert args == {"space": space, "uid": deployed.workflow, "instance_id": "a/b"}
    assert label == "/v2/spaces/<space>/resources/<uid>/instances/<id>"

    events = client.get(base + "/a%2Fb/events", headers=auth)
    assert events.status_code == 200 and events.get_json() == {"events": []}
    assert requests[-1][0] == "instances.inbox" and requests[-1][1]["instance_id"] == "a/b"
    assert requests[-1][2] == "/v2/spaces/<space>/resources/<uid>/instances/<id>/events"

    # '/a/b' (a real slash) is the sub-resource "b" of instance "a": no such route.
    assert client.get(base + "/a/b", headers=auth).status_code == 404
    # '%252F' is the three characters '%2F', not a slash.
    assert client.get(base + "/a%252Fb", headers=auth).get_json()["error"]["code"] == "unknown_instance"
    # An id that is not UTF-8 is 400 from the URL map's converter, after authentication.
    bad = client.get(base + "/%FF", headers=auth)
    assert bad.status_code == 400 and "instance id" in bad.get_json()["error"]["message"]
    assert client.get(base + "/%FF").status_code == 401


def test_the_instance_collection_keeps_its_trailing_slash_and_405s_carry_allow(seen, space_token, db_url):
    client, requests = seen
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get(base + "/", headers=auth).get_json() == {"instances": []}
    assert requests[-1][0] == "instances.list_instances"
    refused = client.delete(base + "/x%2Fy/events", headers=auth)
    assert refused.status_code == 405 and refused.get_json()["error"]["code"] == "method_not_allowed"
    assert set(refused.headers["Allow"].split(", ")) == {"GET", "HEAD", "POST"}


def test_an_idempotent_event_is_the_same_request_however_its_id_is_encoded(seen, space_token, db_url):
    """The request fingerprint hashes the decoded path (``request.path``), as before the instance
    routes moved into the URL map: ``a%2Fb`` and ``a%2fb`` name one instance, one request."""
    client, _ = seen
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    auth = {"Authorization": f"Bearer {token}"}
    assert client.post(base, json={"id": "a/b"}, headers=auth).status_code == 201
    keyed = {**auth, "Idempotency-Key": "same-key"}
    first = client.post(base + "/a%2Fb/events", json={"type": "t"}, headers=keyed)
    again = client.post(base + "/a%2fb/events", json={"type": "t"}, headers=keyed)
    assert (first.status_code, again.status_code) == (202, 202), again.get_json()
    assert len(client.get(base + "/a%2Fb/events", headers=auth).get_json()["events"]) == 1
