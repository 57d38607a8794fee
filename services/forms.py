"""Per-Form acceptance rules that need the database (docs/spec/http-api.md#api-auth, docs/spec/worker-forms.md; docs/spec/durable-workflow.md and 003).

Everything here runs inside the accepting transaction, *before* side effects: a rule that
says no raises ``DomainError`` and the caller's transaction rolls back, leaving the database
exactly as it was. The pure shape checks (closed specs, names, weights) are the marshmallow
schemas of ``host_api.schemas``; these functions decide what needs other resources.

Locks (Postgres row locks, so that two concurrent requests cannot both pass a check that only
one of them may pass):

* a referenced resource is read ``FOR KEY SHARE``; a DELETE locks its resource ``FOR UPDATE``,
  so "delete X" and "create something referring to X" serialise;
* the ModuleWorker row is locked ``FOR NO KEY UPDATE`` by every Deployment, DurableWorkflow and
  WorkerCronTrigger create/update of that Worker: the "is this allocation compatible with these
  Workflows and Triggers" checks of one Worker run one at a time.

Error codes (docs/spec/http-api.md#api-op: never confuse a short race with a lasting dependency):
``reference_not_found`` (404), ``dependency_conflict`` (409, lasting), ``resource_busy`` (409,
short-lived: an unverified Version, a referrer being deleted), ``immutable_field`` (409).
"""

from __future__ import annotations

import dataclasses

import rfc8785
import sqlalchemy as sa
from sqlalchemy import orm

from models import resource_sql
from models import resources as res_models
from models.errors import DomainError
from services import ids
from takohost.domain.forms import FORM_URLS

#: Exact Form URL → short Form name (what ``resources.form`` stores). Anything else is unsupported.
FORM_BY_URL: dict[str, str] = {url: form for form, url in FORM_URLS.items()}


def label(resource: res_models.Resource) -> str:
    """How an error message names a resource: ``"WorkerVersion 'orders-1a2b' (<uid>)"`` (docs/spec/host-features.md#hf-newcomer
    item 4: by name as well as UID)."""
    return f"{resource.form} {resource.name!r} ({resource.uid})"

#: Reference kinds (``resource_refs.kind``).
REF_WORKER = "worker"
REF_VERSION = "version"
REF_BINDING = "binding"


@dataclasses.dataclass(frozen=True)
class Ref:
    """One reference held by a spec: target UID, kind, expected Form and JSON pointer in the body."""

    target_uid: str
    kind: str
    form: str
    pointer: str


def references(form: str, spec: dict) -> list[Ref]:
    """Every ``{"resourceUid"}`` reference of a (schema-valid) ``spec`` of ``form``, in body order."""
    refs: list[Ref] = []
    if "worker" in spec:
        refs.append(
            Ref(spec["worker"]["resourceUid"], REF_WORKER, "ModuleWorker", "/spec/worker/resourceUid")
        )
    if form == "WorkerDeployment":
        for index, entry in enumerate(spec["versions"]):
            refs.append(
                Ref(
                    entry["version"]["resourceUid"],
                    REF_VERSION,
                    "WorkerVersion",
                    f"/spec/versions/{index}/version/resourceUid",
                )
            )
    if form == "WorkerVersion":
        for index, binding in enumerate(spec.get("workflowBindings", [])):
            refs.append(
                Ref(
                    binding["resource"]["resourceUid"],
                    REF_BINDING,
                    "DurableWorkflow",
                    f"/spec/workflowBindings/{index}/resource/resourceUid",
                )
            )
    return refs


def resolve_refs_txn(session: orm.Session, *, space: str, refs: list[Ref]) -> dict[str, res_models.Resource]:
    """Load and lock (``FOR KEY SHARE``) every referenced resource; returns them by UID.

    Raises:
        DomainError: ``reference_not_found`` (no live resource of that UID in ``space``, a UID of
            a shape the host never issues — decided before any query —, or it is being deleted);
            ``dependency_conflict`` (it exists but is of another Form).
    """
    found: dict[str, res_models.Resource] = {}
    target: res_models.Resource | None
    for ref in refs:
        if ref.target_uid in found:
            target = found[ref.target_uid]
        elif not ids.is_host_id(ref.target_uid):  # names nothing; never sent to the database
            raise DomainError(
                "reference_not_found",
                f"{ref.pointer}: no live resource with this UID in this Space (not a UID this host issued)",
                {"pointer": ref.pointer, "resourceUid": ref.target_uid},
            )
        else:
            target = session.scalar(
                sa.select(res_models.Resource)
                .where(
                    res_models.Resource.uid == ref.target_uid,
                    res_models.Resource.space == space,
                    res_models.Resource.deleted_at.is_(None),
                )
                .with_for_update(read=True, key_share=True)
            )
            if target is None:
                raise DomainError(
                    "reference_not_found",
                    f"{ref.pointer}: no live resource {ref.target_uid!r} in this Space",
                    {"pointer": ref.pointer, "resourceUid": ref.target_uid},
                )
            if target.phase == "deleting":
                raise DomainError(
                    "reference_not_found",
                    f"{ref.pointer}: {label(target)} is being deleted",
                    {"pointer": ref.pointer, "resourceUid": ref.target_uid},
                )
            found[ref.target_uid] = target
        if target.form != ref.form:
            raise DomainError(
                "dependency_conflict",
                f"{ref.pointer}: {label(target)} is a {target.form}, not a {ref.form}",
                {"pointer": ref.pointer, "resourceUid": ref.target_uid, "form": FORM_URLS[target.form]},
            )
    return found


# --- create / update ----------------------------------------------------------------------------


def check_create_txn(
    session: orm.Session, *, form: str, spec: dict, resolved: dict[str, res_models.Resource]
) -> None:
    """The Form rules of a create, after :func:`resolve_refs_txn` (docs/spec/worker-forms.md; docs/spec/durable-workflow.md, 003).

    Raises:
        DomainError: ``dependency_conflict``, ``resource_busy``.
    """
    if form == "WorkerDeployment":
        _check_allocation_txn(session, spec=spec, resolved=resolved)
    elif form == "DurableWorkflow":
        _check_workflow_class_txn(
            session, worker_uid=spec["worker"]["resourceUid"], class_name=spec["className"]
        )
    elif form == "WorkerCronTrigger":
        _check_scheduled_handler_txn(session, worker_uid=spec["worker"]["resourceUid"])


def check_immutable(resource: res_models.Resource, spec: dict) -> None:
    """The fields a PUT (whole replacement) may not change; pure, checked before anything else.

    ``worker`` never changes; a WorkerVersion spec never changes; a DurableWorkflow keeps its
    ``className`` (docs/spec/durable-workflow.md#dw-abi "PUTは全体置換で、同じworkerとclassNameだけ許す"; docs/spec/cron-trigger.md#cr-spec "Worker
    UIDの変更は副作用前に拒否します"; docs/spec/worker-forms.md#wf-version).

    Raises:
        DomainError: ``immutable_field`` (with ``details.pointer``).
    """
    old = resource.spec
    if "worker" in old and spec["worker"]["resourceUid"] != old["worker"]["resourceUid"]:
        raise DomainError(
            "immutable_field",
            "spec.worker cannot change; delete and re-create instead",
            {"pointer": "/spec/worker/resourceUid"},
        )
    if resource.form == "WorkerVersion" and rfc8785.dumps(spec) != rfc8785.dumps(old):
        raise DomainError(
            "immutable_field", "a WorkerVersion spec is immutable; create a new Version", {"pointer": "/spec"}
        )
    if resource.form == "DurableWorkflow" and spec["className"] != old["className"]:
        raise DomainError(
            "immutable_field",
            "spec.className cannot change; deploy new code through the Worker's Deployment instead",
            {"pointer": "/spec/className"},
        )


def check_update_txn(
    session: orm.Session,
    *,
    resource: res_models.Resource,
    spec: dict,
    resolved: dict[str, res_models.Resource],
) -> None:
    """The Form rules of a PUT of ``resource`` with ``spec``, after :func:`check_immutable` and
    :func:`resolve_refs_txn`: a Deployment's new allocation and a Trigger's handler are re-checked.

    Raises:
        DomainError: ``dependency_conflict``, ``resource_busy``.
    """
    if resource.form == "WorkerDeployment":
        _check_allocation_txn(session, spec=spec, resolved=resolved)
    elif resource.form == "WorkerCronTrigger":
        _check_scheduled_handler_txn(session, worker_uid=spec["worker"]["resourceUid"])


def _lock_worker_txn(session: orm.Session, worker_uid: str) -> None:
    """Serialise the compatibility checks of one Worker (see the module docstring).

    ``FOR NO KEY UPDATE`` conflicts with itself but not with the ``FOR KEY SHARE`` of plain
    references, so creating Versions of the Worker is never blocked by it.
    """
    resource_sql.lock_resource_txn(session, uid=worker_uid, mode="no_key_update")


def _check_allocation_txn(
    session: orm.Session, *, spec: dict, resolved: dict[str, res_models.Resource]
) -> None:
    """WorkerDeployment create/update (docs/spec/worker-forms.md#wf-deployment): distinct validated Versions of this Worker
    that export every live Workflow's class and, while a Trigger exists, ``scheduled``."""
    worker_uid = spec["worker"]["resourceUid"]
    _lock_worker_txn(session, worker_uid)
    workflows = _live_dependents_txn(session, worker_uid=worker_uid, form="DurableWorkflow")
    has_trigger = bool(_live_dependents_txn(session, worker_uid=worker_uid, form="WorkerCronTrigger"))
    unverified: list[res_models.Resource] = []
    for index, entry in enumerate(spec["versions"]):
        pointer = f"/spec/versions/{index}/version/resourceUid"
        version = resolved[entry["version"]["resourceUid"]]
        if version.worker_uid != worker_uid:
            raise DomainError(
                "dependency_conflict",
                f"{pointer}: {label(version)} belongs to another Worker",
                {"pointer": pointer, "resourceUid": version.uid},
            )
        state = version_state(version)
        if state == "failed":
            raise DomainError(
                "dependency_conflict",
                f"{pointer}: {label(version)} failed validation",
                {"pointer": pointer, "resourceUid": version.uid},
            )
        if state == "unverified":
            unverified.append(version)
            continue
        for workflow in workflows:
            if not exports_class(version, workflow.spec["className"]):
                raise DomainError(
                    "dependency_conflict",
                    f"{pointer}: {label(version)} does not export "
                    f"class {workflow.spec['className']!r} needed by {label(workflow)}",
                    {"pointer": pointer, "resourceUid": version.uid, "workflowUid": workflow.uid},
                )
        if has_trigger and not provides_scheduled(version):
            raise DomainError(
                "dependency_conflict",
                f"{pointer}: {label(version)} has no `scheduled` "
                "handler, and a WorkerCronTrigger of this Worker exists",
                {"pointer": pointer, "resourceUid": version.uid},
            )
    if unverified:
        raise DomainError(
            "resource_busy",
            f"{label(unverified[0])} is still being validated; retry shortly",
            {"resourceUids": [v.uid for v in unverified]},
        )


def _check_workflow_class_txn(session: orm.Session, *, worker_uid: str, class_name: str) -> None:
    """DurableWorkflow create (docs/spec/durable-workflow.md "Workflow作成要求の受理前に…"): every weighted Version of
    the applied allocation and of an accepted-but-unfinished create/allocation update must export
    ``class_name``. A definite lack wins over an unverified Version; no Deployment is allowed."""
    _lock_worker_txn(session, worker_uid)
    unverified: list[res_models.Resource] = []
    for version in weighted_versions_txn(session, worker_uid=worker_uid):
        state = version_state(version)
        if state == "unverified":
            unverified.append(version)
        elif not exports_class(version, class_name):
            raise DomainError(
                "dependency_conflict",
                f"weighted {label(version)} of this Worker's "
                f"Deployment does not export a workflow class {class_name!r}",
                {"pointer": "/spec/className", "resourceUid": version.uid},
            )
    _refuse_unverified(unverified)


def _refuse_unverified(unverified: list[res_models.Resource]) -> None:
    """Raise ``resource_busy`` naming the first weighted Version still being validated, if any."""
    if unverified:
        raise DomainError(
            "resource_busy",
            f"weighted {label(unverified[0])} is still being validated; retry shortly",
            {"resourceUids": [v.uid for v in unverified]},
        )


def _check_scheduled_handler_txn(session: orm.Session, *, worker_uid: str) -> None:
    """WorkerCronTrigger create/update (docs/spec/cron-trigger.md#cr-handler "作成: …scheduled handlerの宣言と提供…"): the
    Worker's live Deployment exists and every weighted Version provides ``scheduled``."""
    _lock_worker_txn(session, worker_uid)
    if live_deployment_txn(session, worker_uid=worker_uid) is None:
        raise DomainError(
            "dependency_conflict",
            "the Worker has no Deployment, so no `scheduled` handler is "
            "provided; deploy a Version that defines `scheduled` first",
            {"pointer": "/spec/worker/resourceUid"},
        )
    unverified: list[res_models.Resource] = []
    for version in weighted_versions_txn(session, worker_uid=worker_uid):
        state = version_state(version)
        if state == "unverified":
            unverified.append(version)
        elif not provides_scheduled(version):
            raise DomainError(
                "dependency_conflict",
                f"weighted {label(version)} has no `scheduled` handler",
                {"pointer": "/spec/worker/resourceUid", "resourceUid": version.uid},
            )
    _refuse_unverified(unverified)


# --- delete ---------------------------------------------------------------------------------------


def check_delete_txn(session: orm.Session, *, resource: res_models.Resource) -> None:
    """The DELETE rules (docs/spec/worker-forms.md#wf-worker, docs/spec/worker-forms.md#wf-version; docs/spec/durable-workflow.md#dw-delete "削除は…"; docs/spec/cron-trigger.md#cr-crud "Worker削除は参照が残る間拒否").

    ModuleWorker: no live resource refers to it. WorkerVersion: no live Deployment weights it.
    DurableWorkflow: no live WorkerVersion binds it (weighted or not). A referrer that is itself
    being deleted is a short race (``resource_busy``), any other a lasting dependency.

    Raises:
        DomainError: ``dependency_conflict``, ``resource_busy``.
    """
    kinds = {
        "ModuleWorker": (REF_WORKER,),
        "WorkerVersion": (REF_VERSION,),
        "DurableWorkflow": (REF_BINDING,),
    }.get(resource.form)
    if kinds is None:
        return
    referrers = session.scalars(
        sa.select(res_models.Resource)
        .join(res_models.ResourceRef, res_models.ResourceRef.source_uid == res_models.Resource.uid)
        .where(
            res_models.ResourceRef.target_uid == resource.uid,
            res_models.ResourceRef.kind.in_(kinds),
            res_models.Resource.deleted_at.is_(None),
            res_models.Resource.uid != resource.uid,
        )
        .order_by(res_models.Resource.created_at)
    ).all()
    lasting = [r for r in referrers if r.phase != "deleting"]
    if lasting:
        raise DomainError(
            "dependency_conflict",
            f"{len(lasting)} live resource(s) still refer to this "
            f"{resource.form}, e.g. {lasting[0].form} {lasting[0].name!r}",
            {"referrers": [{"uid": r.uid, "form": FORM_URLS[r.form], "name": r.name} for r in lasting[:20]]},
        )
    if referrers:
        raise DomainError(
            "resource_busy",
            "resources referring to this one are being deleted; retry shortly",
            {"referrers": [{"uid": r.uid, "name": r.name} for r in referrers[:20]]},
        )


# --- shared queries ---------------------------------------------------------------------------------


def version_state(version: res_models.Resource) -> str:
    """``validated``, ``failed`` (its code did not import) or ``unverified`` (not yet known)."""
    validated = (version.observed or {}).get("validated")
    if validated is True:
        return "validated"
    if validated is False or version.phase == "failed":
        return "failed"
    return "unverified"


def exports_class(version: res_models.Resource, class_name: str) -> bool:
    """True when the validated Version's main module exports ``class_name`` with a callable ``run``."""
    return class_name in (version.observed or {}).get("workflowClasses", [])


def provides_scheduled(version: res_models.Resource) -> bool:
    """True when the validated Version's main module defines a callable ``scheduled``."""
    return "scheduled" in (version.observed or {}).get("handlers", [])


def live_deployment_txn(session: orm.Session, *, worker_uid: str) -> res_models.Resource | None:
    """The Worker's live Deployment that is not being deleted, or None."""
    return session.scalar(
        sa.select(res_models.Resource).where(
            res_models.is_live("WorkerDeployment", worker_uid=worker_uid),
            res_models.Resource.phase != "deleting",
        )
    )


def allocation_uids(deployment: res_models.Resource) -> list[str]:
    """UIDs weighted by the accepted spec *and* by the applied allocation (``observed.versions``).

    While an allocation update is unfinished both may serve; a check must hold for both
    (docs/spec/durable-workflow.md#dw-resource: the host looks at the live Deployment's weights and at any
    accepted, unfinished allocation update).
    """
    uids: list[str] = []
    entries = list(deployment.spec["versions"]) + list((deployment.observed or {}).get("versions", []))
    for entry in entries:
        uid = entry["version"]["resourceUid"]
        if uid not in uids:
            uids.append(uid)
    return uids


def weighted_versions_txn(session: orm.Session, *, worker_uid: str) -> list[res_models.Resource]:
    """The Versions weighted by the Worker's live Deployment (spec ∪ applied), or ``[]``."""
    deployment = live_deployment_txn(session, worker_uid=worker_uid)
    if deployment is None:
        return []
    uids = allocation_uids(deployment)
    rows = session.scalars(sa.select(res_models.Resource).where(res_models.Resource.uid.in_(uids))).all()
    by_uid = {row.uid: row for row in rows}
    return [by_uid[uid] for uid in uids if uid in by_uid]


def _live_dependents_txn(session: orm.Session, *, worker_uid: str, form: str) -> list[res_models.Resource]:
    """Live resources of ``form`` whose ``worker`` is ``worker_uid`` and that are not being deleted."""
    return list(
        session.scalars(
            sa.select(res_models.Resource)
            .where(
                res_models.is_live(form, worker_uid=worker_uid),
                res_models.Resource.phase != "deleting",
            )
            .order_by(res_models.Resource.created_at)
        ).all()
    )


def workflow_ready_txn(session: orm.Session, *, workflow: res_models.Resource) -> bool:
    """DurableWorkflow ``observed.ready`` (docs/spec/durable-workflow.md#dw-abi "全weighted Versionに正しいclassが揃うまでReadyでない";
    "ready:trueは新規instanceを受理できることだけを表し"): :func:`workflow_unready_reason_txn` is None."""
    return workflow_unready_reason_txn(session, workflow_uid=workflow.uid) is None


@dataclasses.dataclass(frozen=True)
class WeightedVersion:
    """What readiness needs of one WorkerVersion (never its spec: that holds the modules)."""

    uid: str
    name: str
    phase: str
    validated: object  # observed.validated: True, False or None (not yet known)
    classes: tuple[str, ...]  # observed.workflowClasses

    def label(self) -> str:
        """As :func:`label` names a resource."""
        return f"WorkerVersion {self.name!r} ({self.uid})"


@dataclasses.dataclass(frozen=True)
class Readiness:
    """The facts behind a DurableWorkflow's ``ready`` (:data:`models.resource_sql.WORKFLOW_READINESS`).

    ``deployment`` is ``(uid, name)`` of the Worker's live Deployment or ``None``; ``applied`` the
    Version UIDs of its applied allocation (``observed.versions``) in order; ``versions`` those of
    them that exist, by UID.
    """

    workflow_uid: str
    workflow_name: str
    class_name: str
    deployment: tuple[str, str] | None
    applied: tuple[str, ...]
    versions: dict[str, WeightedVersion]

    def label(self) -> str:
        """The workflow as :func:`label` names a resource."""
        return f"DurableWorkflow {self.workflow_name!r} ({self.workflow_uid})"

    def unready_reason(self) -> str | None:
        """Why the workflow cannot accept new instances, or ``None`` when it is ready (pure).

        Ready only when the Worker has a live Deployment whose *applied* allocation is non-empty
        and every weighted Version of it is validated and exports the class (docs/writing-workflows.md
        "When a workflow accepts instances"); the reason names the resources by name and UID."""
        if self.deployment is None:
            return (
                f"its Worker has no Deployment, so no code runs class {self.class_name!r} "
                "(deploy a Version that exports it: `takohost deploy DIR`)"
            )
        deployment = f"WorkerDeployment {self.deployment[1]!r} ({self.deployment[0]})"
        if not self.applied:
            return f"{deployment} is not applied yet (its Operation has not finished)"
        if any(uid not in self.versions for uid in self.applied):
            return f"a weighted Version of {deployment} is gone"
        for uid in dict.fromkeys(self.applied):
            version = self.versions[uid]
            if version.validated is not True:
                failed = version.validated is False or version.phase == "failed"
                return f"weighted {version.label()} is {'failed' if failed else 'not validated'}"
            if self.class_name not in version.classes:
                return f"weighted {version.label()} does not export class {self.class_name!r}"
        return None


def workflow_readiness_txn(session: orm.Session, *, workflow_uid: str) -> Readiness | None:
    """The :class:`Readiness` facts of DurableWorkflow ``workflow_uid`` in one statement (pending
    ORM changes of ``session`` are flushed first); ``None`` when no such resource exists."""
    session.flush()
    row = session.connection().exec_driver_sql(resource_sql.WORKFLOW_READINESS, {"uid": workflow_uid}).first()
    return None if row is None else readiness_of(workflow_uid, tuple(row))


def readiness_of(workflow_uid: str, row: tuple) -> Readiness:
    """The :class:`Readiness` of DurableWorkflow ``workflow_uid`` from a row of
    ``models.resource_sql.WORKFLOW_READINESS``'s columns (also read by the create's lock)."""
    name, class_name, deployment_uid, deployment_name, applied, versions = row
    entries = applied if isinstance(applied, list) else []
    return Readiness(
        workflow_uid=workflow_uid,
        workflow_name=name,
        class_name=class_name,
        deployment=None if deployment_uid is None else (deployment_uid, deployment_name),
        applied=tuple(entry["version"]["resourceUid"] for entry in entries),
        versions={
            v["uid"]: WeightedVersion(
                uid=v["uid"],
                name=v["name"],
                phase=v["phase"],
                validated=v["validated"],
                classes=tuple(v["classes"] or ()),
            )
            for v in versions or ()
        },
    )


def workflow_unready_reason_txn(session: orm.Session, *, workflow_uid: str) -> str | None:
    """Why DurableWorkflow ``workflow_uid`` cannot accept new instances, or ``None`` when it is
    ready (:meth:`Readiness.unready_reason`; the same predicate is ``observed.ready`` and the gate
    of instance create). A resource that does not exist is never ready."""
    readiness = workflow_readiness_txn(session, workflow_uid=workflow_uid)
    if readiness is None:
        return "no such DurableWorkflow"
    return readiness.unready_reason()
