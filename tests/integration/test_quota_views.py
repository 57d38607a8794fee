"""Where a Space's quotas are shown (docs/spec/host-features.md#hf-neighbours): ``takohost spaces usage`` (table and
``--json``) against a real API process, the refusal as the CLI prints it, and the console's usage
panel on the workflows page (server-rendered)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from services import tokens
from tests.support import processes, workflows

SOURCE = """
class F:
    def __init__(self, env): pass
    def run(self, event, step): return None
"""


def _rows(db_url: str, *, space: str, workflow: str, statuses: list[str]) -> None:
    """Instances inserted directly (the triggers count them like any other)."""
    import datetime as dt

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        {
            "workflow_uid": workflow, "space": space, "instance_id": f"i-{i:03d}", "status": status, "epoch": 0,
            "created_at": t0, "updated_at": t0, "lifetime_ends_at": t0 + dt.timedelta(days=365),
            "step_count": 0, "next_event_id": 1, "next_sequence": 1, "inbox_count": 2 if i == 0 else 0,
            "inbox_bytes": 0,
        }
        for i, status in enumerate(statuses)
    ]
    with models_db.session_scope(db_url) as session:
        session.execute(sa.insert(inst_models.Instance), rows)


@pytest.fixture()
def populated(db_url):
    space = f"q{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="F")
    _rows(db_url, space=space, workflow=deployed.workflow, statuses=["waiting", "sleeping", "complete"])
    return space, token, deployed


@pytest.fixture(scope="module")
def quota_api(db_url):
    """An API process whose Spaces may hold 2 live instances."""
    process = processes.start_api(env={"TAKOHOST_QUOTA_LIVE_INSTANCES": "2"})
    yield process.extra["url"]
    process.stop()


def _cli(url: str, space: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAKOHOST_URL": url, "TAKOHOST_SPACE": space, "TAKOHOST_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "host_cli", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_spaces_usage_prints_the_quotas_and_a_refusal_names_its_quota(quota_api, populated):
    space, token, deployed = populated
    result = _cli(quota_api, space, token, "spaces", "usage", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["space"] == space
    assert document["quotas"]["liveInstances"] == {"used": 2, "limit": 2}
    assert document["quotas"]["storedEvents"] == {"used": 2, "limit": 100_000}
    assert document["quotas"]["logBytes"] == {"used": 0, "limit": 512 << 20}
    assert set(document["quotas"]) == {"liveInstances", "storedEvents", "logBytes", "versionCodeBytes", "layerBytes"}
    table = _cli(quota_api, space, token, "spaces", "usage")
    assert table.returncode == 0, table.stderr
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in table.stdout.splitlines() if line.count("│") == 5}
    assert lines["live instances"] == ["2", "2", "100%"]
    assert lines["stored events"] == ["2", "100,000", "0%"]
    assert lines["log bytes (retained)"] == ["0 B", "512.0 MiB", "0%"]
    assert lines["package layer bytes"] == ["0 B", "2.0 GiB", "0%"]
    refused = _cli(quota_api, space, token, "instances", "create", deployed.workflow, "--id", "over")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[0].startswith(
        "error: quota_exceeded: the Space's live instances quota is reached (liveInstances: 2 of 2)"
    )


def test_the_workflows_page_shows_the_usage_panel(app, populated, monkeypatch):
    space, token, _ = populated
    monkeypatch.setenv("TAKOHOST_QUOTA_LIVE_INSTANCES", "2")
    monkeypatch.setenv("TAKOHOST_QUOTA_LOG_BYTES", "0")
    client = app.test_client()
    assert client.post("/ui/sign-in", data={"token": token}).status_code == 303
    html = client.get("/ui/workflows").get_data(as_text=True)
    panel = html[html.index('data-panel="usage"'):]
    rows = dict(re.findall(r'<tr data-quota="(\w+)">(.*?)</tr>', panel, re.S))
    assert list(rows) == ["liveInstances", "storedEvents", "logBytes", "versionCodeBytes", "layerBytes"]
    assert "<td class=\"num\" data-used>2</td>" in rows["liveInstances"]
    assert 'value="100"' in rows["liveInstances"] and "full" in rows["liveInstances"]
    assert "<td class=\"num\" data-limit>100,000</td>" in rows["storedEvents"]
    assert "no limit" in rows["logBytes"] and "<meter" not in rows["logBytes"]
    assert "2.0 GiB" in rows["layerBytes"]
