"""API-inst-id through the real gunicorn server: any valid id round-trips through every call.

Requests are sent byte-exact with ``http.client`` (see ``workflows.HttpInstances``); the server
must route on the raw request target, since Werkzeug decodes ``%2F`` before routing.
"""

from __future__ import annotations

import pytest

from tests.integration.test_engine_api import NASTY_IDS
from tests.support import workflows

WAITER = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""


@pytest.fixture(scope="module")
def http(api_server, db_url):
    from models import db as models_db
    from services import tokens

    space = "ids-e2e"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    deployed = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    return workflows.HttpInstances(api_server.extra["url"], token, space, deployed.workflow)


@pytest.mark.parametrize("instance_id", NASTY_IDS, ids=range(len(NASTY_IDS)))
def test_any_valid_id_round_trips_through_gunicorn(http, instance_id):
    path = "/" + http.enc(instance_id)
    assert http.call("POST", body={"id": instance_id}) == (201, {"id": instance_id})
    code, body = http.call("GET", path)
    assert code == 200 and body["id"] == instance_id
    assert instance_id in [i["id"] for i in http.call("GET", "?limit=1000")[1]["instances"]]
    assert http.call("POST", path + "/events", body={"type": "t", "payload": {"id": instance_id}}) == (
        202,
        {},
    )
    code, inbox = http.call("GET", path + "/events")
    assert code == 200 and [e.get("payload") for e in inbox["events"]][-1] == {"id": instance_id}
    code, history = http.call("GET", path + "/history")
    assert code == 200 and history["events"][0]["attributes"] == {"instanceId": instance_id}
    assert http.call("POST", path + "/terminate", timeout=60) == (200, {"status": "terminated"})
    assert http.call("GET", path) == (200, {"id": instance_id, "status": "terminated"})


def test_a_bad_percent_encoding_is_invalid_request(http):
    code, body = http.call("GET", "/%C3%28")
    assert code == 400 and body["error"]["code"] == "invalid_request"
