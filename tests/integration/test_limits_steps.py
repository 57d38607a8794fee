"""The step limit (docs/spec/durable-workflow.md#dw-step: "最多1024 step"; docs/spec/host-limits.md#hl-decisions: the 1025th distinct step name ends the
instance ``errored``/``step_limit_exceeded``): the 1025th effect never runs and no ``except
BaseException`` rescues the instance (1025 commits; the limit is decided by ``decide``)."""

from __future__ import annotations

from services import instances
from tests.support import workflows

MANY = """
class Many:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        marker = event["params"]["marker"]
        def last():
            open(marker, "w").close()
            return {}
        try:
            for i in range(1025):
                step.do(f"s{i}", last if i == 1024 else (lambda: None))
        except BaseException:
            pass                         # cannot rescue the instance
        return {"done": True}
"""


def test_WF_14_the_1025th_effect_never_runs_and_catching_cannot_rescue(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    d = workflows.deploy(db_url, space=space, source=MANY, class_name="Many")
    marker = tmp_path / "1025th-ran"
    instances.create(space=space, workflow_uid=d.workflow, instance_id="wf14", params={"marker": str(marker)})
    assert driver.run() == ["errored"]
    status = instances.status(space=space, workflow_uid=d.workflow, instance_id="wf14")
    assert status["status"] == "errored" and status["error"]["reason"] == "step_limit_exceeded"
    assert not marker.exists()
    row = workflows.instance_row(db_url, workflow=d.workflow, instance_id="wf14")
    assert row.step_count == 1024
