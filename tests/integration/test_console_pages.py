"""The console's instance list (docs/spec/host-features.md#hf-console): newest first, filtered by status and id prefix,
keyset-paged 50 at a time; and bad page tokens or filters are a plain error page, not a crash.

In-process (the Flask app on this session's database); the instances are inserted directly.
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse
import uuid

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from services import console, tokens
from tests.support import workflows

SOURCE = """
class F:
    def __init__(self, env): pass
    def run(self, event, step): return None
"""


@pytest.fixture()
def signed_in(app, db_url):
    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="F")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        {
            "workflow_uid": deployed.workflow, "space": space, "instance_id": f"{'ab'[i % 2]}-{i:03d}",
            "status": ("complete", "errored", "waiting")[i % 3], "epoch": 0,
            "created_at": t0 + dt.timedelta(seconds=i // 2),  # pairs share a createdAt: pk breaks the tie
            "updated_at": t0, "lifetime_ends_at": t0 + dt.timedelta(days=365),
            "step_count": 0, "next_event_id": 1, "next_sequence": 1, "inbox_count": 0, "inbox_bytes": 0,
        }
        for i in range(130)
    ]
    with models_db.session_scope(db_url) as session:
        session.execute(sa.insert(inst_models.Instance), rows)
    client = app.test_client()
    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    return client, deployed.workflow


def _ids(html: str) -> list[str]:
    return re.findall(r'<tr data-instance="([^"]+)">', html)


def _next(html: str) -> str | None:
    found = re.search(r'rel="next" href="([^"]+)"', html)
    return found.group(1).replace("&amp;", "&") if found else None


def test_pages_walk_every_instance_newest_first_once(signed_in):
    client, wf = signed_in
    seen, url, pages = [], f"/ui/workflows/{wf}", 0
    while url:
        html = client.get(url).text
        ids = _ids(html)
        assert len(ids) <= console.PAGE_SIZE
        seen += ids
        url, pages = _next(html), pages + 1
    assert pages == 3
    assert seen == [f"{'ab'[i % 2]}-{i:03d}" for i in range(129, -1, -1)]


def test_status_and_prefix_filters_and_their_pages(signed_in):
    client, wf = signed_in
    html = client.get(f"/ui/workflows/{wf}?status=errored&prefix=b-").text
    expected = [f"b-{i:03d}" for i in range(129, -1, -1) if i % 2 == 1 and i % 3 == 1]
    assert _ids(html) == expected and _next(html) is None
    assert "errored</span> 43" in html  # the counts above the filter are the workflow's, unfiltered
    html = client.get(f"/ui/workflows/{wf}?prefix=a-").text  # 65 ids: two pages, the filter kept
    first = _ids(html)
    assert "prefix=a-" in _next(html)
    rest = _ids(client.get(_next(html)).text)
    assert (len(first), len(rest)) == (50, 15)
    assert first + rest == [f"a-{i:03d}" for i in range(128, -1, -2)]
    assert "No instance matches this filter" in client.get(f"/ui/workflows/{wf}?prefix=zz").text


def test_bad_filters_and_tokens_are_plain_errors(signed_in):
    client, wf = signed_in
    for query, code in (("status=bogus", "invalid_request"), ("page=not-a-token", "invalid_request"),
                        ("page=WzEsMiwzXQ", "invalid_request")):
        response = client.get(f"/ui/workflows/{wf}?{query}")
        assert response.status_code == 400 and f'data-testid="error-code">{code}<' in response.text, query
    response = client.get(f"/ui/workflows/{wf}/instance?id=nope")
    assert response.status_code == 404 and "unknown_instance" in response.text
    assert client.get("/ui/workflows/not-a-uid").status_code == 404


def test_ids_and_documents_are_escaped(signed_in, db_url):
    client, wf = signed_in
    nasty = '<img src=x onerror=alert(1)>"\'&'
    with models_db.session_scope(db_url) as session:
        t0 = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
        session.execute(sa.insert(inst_models.Instance), [{
            "workflow_uid": wf, "space": "x", "instance_id": nasty, "status": "complete", "epoch": 0,
            "params": {"html": "<script>alert(2)</script>"}, "output": {"out": "</pre><script>alert(3)</script>"},
            "created_at": t0, "updated_at": t0, "lifetime_ends_at": t0,
            "step_count": 0, "next_event_id": 1, "next_sequence": 1, "inbox_count": 0, "inbox_bytes": 0,
        }])
    listing = client.get(f"/ui/workflows/{wf}").text
    assert "<img src=x" not in listing and "&lt;img src=x onerror=alert(1)&gt;" in listing
    page = client.get(f"/ui/workflows/{wf}/instance?id={urllib.parse.quote(nasty, safe='')}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert "&lt;/pre&gt;&lt;script&gt;alert(3)" in page.text


def test_the_live_endpoint_answers_204_until_something_changes(signed_in, db_url):
    client, wf = signed_in
    url = f"/ui/workflows/{wf}/instance/live?id=a-002"
    first = client.get(url + "&v=stale")
    assert first.status_code == 200
    body = first.get_json()
    assert body["terminal"] is False and 'data-testid="status"' in body["html"]
    assert client.get(url + "&v=" + urllib.parse.quote(body["v"])).status_code == 204
    with models_db.session_scope(db_url) as session:
        session.execute(
            sa.update(inst_models.Instance)
            .where(inst_models.Instance.workflow_uid == wf, inst_models.Instance.instance_id == "a-002")
            .values(status="complete", next_event_id=2)
        )
    changed = client.get(url + "&v=" + urllib.parse.quote(body["v"]))
    assert changed.status_code == 200 and changed.get_json()["terminal"] is True
    signed_out = client.application.test_client().get(url + "&v=x")
    assert signed_out.status_code == 401 and signed_out.get_json() == {"signedOut": True}


def test_a_long_history_lists_its_newest_events_and_pages_the_whole_of_it(signed_in, db_url):
    client, wf = signed_in
    with models_db.session_scope(db_url) as session:
        instance = session.scalar(sa.select(inst_models.Instance).where(
            inst_models.Instance.workflow_uid == wf, inst_models.Instance.instance_id == "b-001"))
        t0 = instance.created_at
        session.execute(sa.insert(inst_models.HistoryEvent), [
            {"instance_pk": instance.pk, "event_id": n, "event_type": "EventAccepted",
             "attributes": {"sequence": n, "type": "note"}, "event_timestamp": t0 + dt.timedelta(milliseconds=n)}
            for n in range(1, 601)
        ])
        instance.next_event_id = 601
    page = client.get(f"/ui/workflows/{wf}/instance?id=b-001").text
    rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="nowrap">', page)
    assert rows == [str(n) for n in range(401, 601)]
    assert "events 401–600 of 600" in page
    history = client.get(f"/ui/workflows/{wf}/instance/history?id=b-001").text
    first = re.findall(r'<tr><td class="num">(\d+)</td>', history)
    later = re.search(r'rel="next" href="([^"]+)"', history).group(1).replace("&amp;", "&")
    rest = re.findall(r'<tr><td class="num">(\d+)</td>', client.get(later).text)
    assert first + rest == [str(n) for n in range(1, 601)] and len(first) == 500


def test_the_workflow_page_shows_the_deployed_versions_replay_check(app, db_url):
    """docs/testing.md "Checking a candidate against live instances": the check's outcome, kept on
    the Version's observed state, is shown on the workflow page with the diverging instances linked."""
    from models import resources as res_models
    from models.base import utcnow
    from services import replay_checks

    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="F")
    client = app.test_client()
    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    with models_db.session_scope(db_url) as session:
        name = session.get(res_models.Resource, deployed.version).name
        workflow = session.get(res_models.Resource, deployed.workflow).name
    html = client.get(f"/ui/workflows/{deployed.workflow}").text
    assert "no replay check" in html and f"takohost versions check {name}" in html

    diverged = {"workflow": workflow, "id": "order/7", "status": "waiting", "result": "diverged", "step": 2,
                "message": "expected step 'nap' (sleep), found step 'rest' (sleep)"}
    fine = {"workflow": workflow, "id": "order/8", "status": "waiting", "result": "compatible", "message": ""}
    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, deployed.version)
        replay_checks.record_txn(session, version=version, check=replay_checks.summary(
            operation_id=str(uuid.uuid4()), terminal=0, results=[diverged, fine], now=utcnow()))
    html = client.get(f"/ui/workflows/{deployed.workflow}").text
    assert "replay check failed" in html and "1 diverged" in html and "1 compatible" in html
    assert re.search(r'href="[^"]*instance\?id=order(/|%2F)7">order/7</a>: diverged at step 2', html), html
    assert "found step &#39;rest&#39;" in html

    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, deployed.version)
        replay_checks.record_txn(session, version=version, check=replay_checks.summary(
            operation_id=str(uuid.uuid4()), terminal=5, results=[fine], now=utcnow()))
    html = client.get(f"/ui/workflows/{deployed.workflow}").text
    assert "replay check passed" in html and "1 compatible (with up to 5 ended instances)" in html


def test_the_inbox_lists_the_unconsumed_events_as_the_api_serves_them(signed_in, db_url):
    client, wf = signed_in
    accepted = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    with models_db.session_scope(db_url) as session:
        pk = session.scalar(
            sa.select(inst_models.Instance.pk).where(
                inst_models.Instance.workflow_uid == wf, inst_models.Instance.instance_id == "a-002"
            )
        )
        session.execute(sa.insert(inst_models.InboxEvent), [
            {"instance_pk": pk, "sequence": 2, "type": "bare", "payload": None, "canonical_bytes": 0,
             "accepted_at": accepted},
            {"instance_pk": pk, "sequence": 1, "type": "approved", "payload": {"by": "<ann>"}, "canonical_bytes": 12,
             "accepted_at": accepted},
        ])
    page = client.get(f"/ui/workflows/{wf}/instance?id=a-002").text
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td><td>([^<]*)</td><td>(.*?)</td><td>([^<]*)</td></tr>", page)
    assert rows == [
        ("1", "approved", '<code>{&#34;by&#34;: &#34;&lt;ann&gt;&#34;}</code>', "2026-01-02 03:04:05.678 UTC"),
        ("2", "bare", "", "2026-01-02 03:04:05.678 UTC"),
    ]
