"""``GET /v2/spaces/{space}/resources/{uid}/runs`` (docs/spec/cron-trigger.md#cr-runs): newest first, recorded and
skipped matches, deliveries, paging, and the 404 rules."""

from __future__ import annotations

import datetime as dt

from models import cron as cron_models
from models import db as models_db
from tests.integration.test_cron_support import at, create_stack, decide, delete_trigger
from workers import cron_tasks


def _get(client, space: str, token: str, uid: str, query: str = ""):
    return client.get(
        f"/v2/spaces/{space}/resources/{uid}/runs{query}", headers={"Authorization": f"Bearer {token}"}
    )


def test_runs_list_recorded_and_skipped_matches_newest_first(
    client, db_url: str, space_token: tuple[str, str]
) -> None:
    space, token = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T09:58:00Z"))
    uid = stack.trigger_uid
    [(first, _)] = decide(db_url, now=at("2030-03-04T10:00:00.250Z"), triggers=[uid])
    decide(
        db_url, now=at("2030-03-04T10:11:15Z"), triggers=[uid], previous_tick=at("2030-03-04T10:00:00.250Z")
    )
    [(last, _)] = decide(db_url, now=at("2030-03-04T10:15:00.125Z"), triggers=[uid])
    assert cron_tasks.deliver(first) == "ok"
    response = _get(client, space, token, uid)
    assert response.status_code == 200
    body = response.get_json()
    assert "nextPageToken" not in body
    runs = body["runs"]
    assert [r["scheduledTime"] for r in runs] == [
        "2030-03-04T10:15:00Z",
        "2030-03-04T10:10:00Z",
        "2030-03-04T10:05:00Z",
        "2030-03-04T10:00:00Z",
    ]
    assert runs[0] == {
        "cron": "*/5 * * * *",
        "scheduledTime": "2030-03-04T10:15:00Z",
        "recordedAt": "2030-03-04T10:15:00.125Z",
        "deliveries": [],
    }
    for skipped in runs[1:3]:
        assert skipped["outcome"] == "skipped" and skipped["cron"] == "*/5 * * * *"
        assert skipped["reason"].startswith("no beat was running at scheduledTime")
        assert set(skipped) == {"cron", "scheduledTime", "outcome", "reason"}
    [delivery] = runs[3]["deliveries"]
    assert delivery["outcome"] == "ok" and "error" not in delivery
    assert delivery["startedAt"].endswith("Z") and delivery["finishedAt"] >= delivery["startedAt"]
    assert runs[3]["recordedAt"] == "2030-03-04T10:00:00.250Z"
    assert last != first


def test_runs_show_failed_unknown_and_running_deliveries(
    client, db_url: str, space_token: tuple[str, str]
) -> None:
    space, token = space_token
    uid = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-03-05T10:00:30Z")).trigger_uid
    [(match_pk, _)] = decide(db_url, now=at("2030-03-05T10:01:00.100Z"), triggers=[uid])
    with models_db.session_scope(db_url) as session:
        session.add_all(
            [
                cron_models.CronDelivery(
                    match_pk=match_pk,
                    started_at=at("2030-03-05T10:01:00.200Z"),
                    finished_at=at("2030-03-05T10:01:20Z"),
                    outcome="unknown",
                    error="vanished",
                ),
                cron_models.CronDelivery(
                    match_pk=match_pk,
                    started_at=at("2030-03-05T10:01:21Z"),
                    finished_at=at("2030-03-05T10:01:22Z"),
                    outcome="failed",
                    error="RuntimeError: boom",
                ),
                cron_models.CronDelivery(match_pk=match_pk, started_at=at("2030-03-05T10:01:23Z")),
            ]
        )
    [run] = _get(client, space, token, uid).get_json()["runs"]
    assert run["deliveries"] == [
        {
            "startedAt": "2030-03-05T10:01:00.200Z",
            "finishedAt": "2030-03-05T10:01:20.000Z",
            "outcome": "unknown",
            "error": "vanished",
        },
        {
            "startedAt": "2030-03-05T10:01:21.000Z",
            "finishedAt": "2030-03-05T10:01:22.000Z",
            "outcome": "failed",
            "error": "RuntimeError: boom",
        },
        {"startedAt": "2030-03-05T10:01:23.000Z", "outcome": "running"},
    ]


def test_runs_are_paged_without_gaps_or_repeats(client, db_url: str, space_token: tuple[str, str]) -> None:
    space, token = space_token
    uid = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-03-06T10:00:00Z")).trigger_uid
    start = at("2030-03-06T10:01:00Z")
    with models_db.session_scope(db_url) as session:
        for i in range(130):
            t = start + dt.timedelta(minutes=i)
            if i % 3:
                session.add(
                    cron_models.CronMatch(
                        trigger_uid=uid,
                        space=space,
                        worker_uid="w",
                        cron="* * * * *",
                        scheduled_time=t,
                        recorded_at=t,
                        state="done",
                    )
                )
            else:
                session.add(
                    cron_models.CronSkip(
                        trigger_uid=uid, cron="* * * * *", scheduled_time=t, reason="test", recorded_at=t
                    )
                )
    seen: list[str] = []
    query = ""
    for _ in range(10):
        body = _get(client, space, token, uid, query).get_json()
        seen.extend(r["scheduledTime"] for r in body["runs"])
        if "nextPageToken" not in body:
            break
        query = f"?pageToken={body['nextPageToken']}"
    expected = [
        (start + dt.timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in reversed(range(130))
    ]
    assert seen == expected


def test_runs_not_found_rules(client, db_url: str, space_token: tuple[str, str]) -> None:
    space, token = space_token
    stack = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-03-07T10:00:00Z"))
    deleted = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-03-07T10:00:00Z"))
    delete_trigger(db_url, trigger_uid=deleted.trigger_uid, now=at("2030-03-07T10:00:01Z"))
    assert _get(client, space, token, stack.trigger_uid).status_code == 200
    for uid in (
        stack.worker_uid,
        stack.version_uid,
        stack.deployment_uid,
        deleted.trigger_uid,
        "no-such-uid",
    ):
        response = _get(client, space, token, uid)
        assert response.status_code == 404 and response.get_json()["error"]["code"] == "not_found"
    assert _get(client, space, "wrong-token", stack.trigger_uid).status_code == 401
    bad = _get(client, space, token, stack.trigger_uid, "?pageToken=%%%")
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_request"


def test_runs_of_another_spaces_trigger_are_not_found(
    client, db_url: str, space_token: tuple[str, str]
) -> None:
    from services import tokens

    space, token = space_token
    other_space = f"{space}-b"
    with models_db.session_scope(db_url) as session:
        tokens.create_token_txn(session, space=other_space)
    foreign = create_stack(db_url, space=other_space, cron="* * * * *", now=at("2030-03-07T10:00:00Z"))
    # Our token on our Space's URL, naming the other Space's trigger.
    response = _get(client, space, token, foreign.trigger_uid)
    assert response.status_code == 404
    # Our token on the other Space's URL.
    assert _get(client, other_space, token, foreign.trigger_uid).status_code == 404
