"""``forms.Readiness.unready_reason``: the predicate behind a DurableWorkflow's ``ready`` and the
gate of instance create (docs/spec/durable-workflow.md#dw-abi "全weighted Versionに正しいclassが揃うまでReadyでない"), on facts
read in one statement (``models.resource_sql.WORKFLOW_READINESS``)."""

from __future__ import annotations

from services.forms import Readiness, WeightedVersion


def version(uid: str, *, validated: object = True, phase: str = "ready", classes=("Orders",)) -> WeightedVersion:
    return WeightedVersion(uid=uid, name=f"v-{uid}", phase=phase, validated=validated, classes=tuple(classes))


def facts(*, deployment=("d1", "orders"), applied=("v1",), versions=None) -> Readiness:
    known = {"v1": version("v1")} if versions is None else {v.uid: v for v in versions}
    return Readiness(
        workflow_uid="w1",
        workflow_name="orders",
        class_name="Orders",
        deployment=deployment,
        applied=tuple(applied),
        versions=known,
    )


def test_ready_when_every_weighted_version_is_validated_and_exports_the_class():
    assert facts().unready_reason() is None
    both = facts(applied=("v1", "v2", "v1"), versions=[version("v1"), version("v2")])
    assert both.unready_reason() is None
    assert facts().label() == "DurableWorkflow 'orders' (w1)"


def test_each_reason_names_what_is_missing():
    assert "has no Deployment" in facts(deployment=None).unready_reason()
    assert facts(applied=()).unready_reason() == "WorkerDeployment 'orders' (d1) is not applied yet (its Operation has not finished)"
    assert facts(applied=("v1", "v9")).unready_reason() == "a weighted Version of WorkerDeployment 'orders' (d1) is gone"
    assert facts(versions=[version("v1", validated=None)]).unready_reason() == "weighted WorkerVersion 'v-v1' (v1) is not validated"
    assert facts(versions=[version("v1", validated=False)]).unready_reason() == "weighted WorkerVersion 'v-v1' (v1) is failed"
    assert facts(versions=[version("v1", validated=None, phase="failed")]).unready_reason().endswith("is failed")
    assert facts(versions=[version("v1", classes=("Other",))]).unready_reason() == (
        "weighted WorkerVersion 'v-v1' (v1) does not export class 'Orders'"
    )
