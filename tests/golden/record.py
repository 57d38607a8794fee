"""Record the golden histories from the real engine (run by ``scripts/record_golden_histories.py``;
not collected by the test suite: the name does not start with ``test_``).

Each scenario of ``scenarios.py`` is deployed into this run's database and driven through the
engine's replay contexts (real Postgres, Redis leases, sandbox children; ``tests.support.workflows
.Driver`` with a clock that starts at ``scenarios.START``), then its HTTP history and status are
written to ``tests/golden/<name>.json`` in the export format (``takohost.testing.HistoryFile``)."""

from __future__ import annotations

import json
import os

from services import instance_common, instance_events, instance_history, instances
from services.instance_pages import PageRequest
from takohost import manifest, testing
from tests.golden import scenarios
from tests.support import workflows


def _record(name: str, *, db_url: str, space: str, driver: workflows.Driver, tmp) -> dict:
    scenario = scenarios.SCENARIOS[name]
    project = manifest.load_project(scenarios.ROOT / scenario["dir"])
    modules = dict(project.modules)
    source = modules.pop(project.manifest.main)
    deployed = workflows.deploy(
        db_url,
        space=space,
        source=source,
        class_name=scenario["className"],
        extra_modules=modules,
        variables=project.manifest.variables or None,
    )
    instance_id = f"golden-{name}"
    params = scenarios.params_for(name, tmp)
    instances.create(
        space=space,
        workflow_uid=deployed.workflow,
        instance_id=instance_id,
        params=instance_common.ABSENT if params is None else params,
        now=driver.clock(),
    )
    driver.run()
    for action in scenario["actions"]:
        if action[0] == "advance":
            driver.advance(action[1])
        else:
            instance_events.send_event(
                space=space,
                workflow_uid=deployed.workflow,
                instance_id=instance_id,
                event_type=action[1],
                payload=action[2],
                now=driver.clock(),
            )
            driver.run()
    events = instance_history.history(
        space=space, workflow_uid=deployed.workflow, instance_id=instance_id, page=PageRequest(limit=1000)
    )
    status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id=instance_id)
    recorded = testing.HistoryFile(
        events=events.events,
        instance_id=instance_id,
        workflow=scenario["className"],
        status={k: v for k, v in status.items() if k in ("status", "output", "error")},
    ).to_json()
    return {**recorded, "golden": {"scenario": name, "recordedWith": "the engine (tests/golden/record.py)"}}


def test_record_golden_histories(db_url, space_token, monkeypatch, tmp_path):
    """Record every scenario (or those named in ``TAKOHOST_GOLDEN_ONLY``, comma-separated)."""
    only = [n for n in os.environ.get("TAKOHOST_GOLDEN_ONLY", "").split(",") if n]
    zygote = workflows.start_zygote()
    try:
        for name in only or list(scenarios.SCENARIOS):
            driver = workflows.Driver(monkeypatch, zygote=zygote, clock=workflows.Clock(scenarios.START))
            tmp = tmp_path / name
            tmp.mkdir()
            tmp.chmod(0o1777)  # the sandbox identities write the retries' counter here
            body = _record(name, db_url=db_url, space=space_token[0], driver=driver, tmp=tmp)
            scenarios.golden_path(name).write_text(json.dumps(body, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    finally:
        zygote.stop()
