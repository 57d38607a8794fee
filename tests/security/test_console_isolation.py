"""The web console (docs/spec/host-features.md#hf-console) attacked from another Space and from another site.

In-process (the Flask app on this session's database, no worker: instances stay ``queued``, which
is all these checks need). Space A has a workflow, an instance (with params that must not leak),
a cron trigger and Operations; Space B signs in with its own token and tries every A page and
action by A's uids and ids. Each attempt must answer "not found" and show none of A's data;
A's instance must be untouched. Posts without the sign-in's CSRF token, or from another
origin, are refused even with a valid cookie.
"""

from __future__ import annotations

import re
import urllib.parse
import uuid

import pytest

from models import db as models_db
from models import resources as res_models
from models.base import utcnow
from services import instances, tokens
from tests.support import workflows

SOURCE = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""
SECRET = "a-secret-param-of-space-a"


def _sign_in(client, token: str) -> str:
    """Sign ``client`` in; returns the CSRF token of that sign-in (read from a page)."""
    response = client.post("/ui/sign-in", data={"token": token})
    assert response.status_code == 303, response.data
    page = client.get("/ui/workflows")
    assert page.status_code == 200
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)


@pytest.fixture()
def spaces(app, db_url):
    """Space A with data, and a second Space B: ``(a, b)`` dicts of space, token, uids."""
    out = []
    for _ in range(2):
        space = f"s{uuid.uuid4().hex[:12]}"
        with models_db.session_scope(db_url) as session:
            token = tokens.create_token_txn(session, space=space)
        deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="Waiter")
        out.append({"space": space, "token": token, "workflow": deployed.workflow, "worker": deployed.worker})
    a = out[0]
    instances.create(space=a["space"], workflow_uid=a["workflow"], instance_id="A/1 ü", params={"s": SECRET})
    with models_db.session_scope(db_url) as session:
        trigger = workflows._resource(
            session,
            space=a["space"],
            form="WorkerCronTrigger",
            spec={"worker": {"resourceUid": a["worker"]}, "cron": "*/5 * * * *"},
            worker_uid=a["worker"],
        )
        session.flush()
        session.add(
            res_models.Operation(
                id=str(uuid.uuid4()), space=a["space"], kind="create", resource_uid=trigger, generation=1,
                state="failed", effect="none", error={"code": "invalid_spec", "message": "A's secret failure"},
                attempts=1, created_at=utcnow(), updated_at=utcnow(),
            )
        )
    a["trigger"] = trigger
    return out


def _a_pages(a: dict) -> list[str]:
    iid = urllib.parse.quote("A/1 ü", safe="")
    return [
        f"/ui/workflows/{a['workflow']}",
        f"/ui/workflows/{a['workflow']}?status=queued&prefix=A",
        f"/ui/workflows/{a['workflow']}/instance?id={iid}",
        f"/ui/workflows/{a['workflow']}/instance/live?id={iid}",
        f"/ui/triggers/{a['trigger']}",
    ]


def test_owner_sees_its_pages(app, spaces):
    a, _ = spaces
    client = app.test_client()
    _sign_in(client, a["token"])
    for path in _a_pages(a):
        response = client.get(path)
        assert response.status_code == 200, (path, response.data[:500])
    assert SECRET in client.get(_a_pages(a)[2]).text
    assert "A&#39;s secret failure" in client.get("/ui/operations").text or "A's secret failure" in client.get(
        "/ui/operations"
    ).text


def test_space_b_cannot_see_or_act_on_space_a(app, spaces):
    a, b = spaces
    client = app.test_client()
    csrf = _sign_in(client, b["token"])
    for path in _a_pages(a):
        response = client.get(path)
        assert response.status_code in (401, 404), (path, response.status_code)
        for leak in (SECRET, "A/1", a["trigger"], "*/5 * * * *"):
            assert leak not in response.text, (path, leak)
    for listing in ("/ui/workflows", "/ui/triggers", "/ui/operations"):
        text = client.get(listing).text
        for leak in (a["workflow"], a["trigger"], "secret failure", a["space"]):
            assert leak not in text, (listing, leak)
    iid = urllib.parse.quote("A/1 ü", safe="")
    event = client.post(
        f"/ui/workflows/{a['workflow']}/instance/events?id={iid}", data={"csrf": csrf, "type": "go"}
    )
    term = client.post(f"/ui/workflows/{a['workflow']}/instance/terminate?id={iid}", data={"csrf": csrf})
    assert event.status_code == 404 and term.status_code == 404
    # A's instance took no event and is not terminated. (A session worker that another module of
    # this test process started may have run it meanwhile: it is then waiting, never terminated.)
    owner = app.test_client()
    _sign_in(owner, a["token"])
    page = owner.get(f"/ui/workflows/{a['workflow']}/instance?id={iid}").text
    assert 'data-testid="inbox-empty"' in page and "EventAccepted" not in page
    assert re.search(r"st-(queued|running|waiting)", page) and "st-terminated" not in page


def test_the_json_api_does_not_take_the_console_cookie(app, spaces):
    a, _ = spaces
    client = app.test_client()
    _sign_in(client, a["token"])
    response = client.get(f"/v2/spaces/{a['space']}/resources")
    assert response.status_code == 401  # the cookie is sent to /ui only and is no bearer


def test_posts_need_the_csrf_token_and_this_origin(app, spaces):
    a, _ = spaces
    client = app.test_client()
    csrf = _sign_in(client, a["token"])
    iid = urllib.parse.quote("A/1 ü", safe="")
    url = f"/ui/workflows/{a['workflow']}/instance/terminate?id={iid}"
    assert client.post(url, data={}).status_code == 403
    assert client.post(url, data={"csrf": "0" * 64}).status_code == 403
    cross = client.post(url, data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert client.post("/ui/sign-out", data={}).status_code == 403


def test_another_site_cannot_sign_a_visitor_in_to_its_space(app, spaces):
    """Login CSRF: a page of evil.example auto-posts the attacker's token to /ui/sign-in; a
    top-level navigation may set even a SameSite=Strict cookie, so the visitor would then work in
    (and send their events to) the attacker's Space."""
    a, _ = spaces
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},  # a sandboxed frame's form
        {"Sec-Fetch-Site": "cross-site"},
    ):
        client = app.test_client()
        answer = client.post("/ui/sign-in", data={"token": a["token"]}, headers=headers)
        assert answer.status_code == 403, headers
        assert "takohost_console" not in answer.headers.get("Set-Cookie", ""), headers
    same = app.test_client().post(
        "/ui/sign-in", data={"token": a["token"]}, headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    )
    assert same.status_code == 303 and "takohost_console=" in same.headers["Set-Cookie"]


def test_signed_out_and_bad_tokens(app, spaces):
    client = app.test_client()
    assert client.get("/ui/workflows").status_code == 303
    assert client.post("/ui/sign-in", data={"token": "tko_wrong"}).status_code == 401
    client.set_cookie("takohost_console", "tko_forged", path="/ui")
    assert client.get("/ui/operations").status_code == 303
    page = client.get("/ui/")
    assert page.status_code == 200 and "Space token" in page.text
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
