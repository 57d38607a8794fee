"""The replay check of a created WorkerVersion as an Operation (docs/spec/host-features.md#hf-testing;
docs/testing.md "Checking a candidate against live instances").

``POST /v2/spaces/{space}/resources/{versionUid}/check`` (``Idempotency-Key``, optional
``{"terminal": N}``) is accepted here as an Operation of kind ``check`` on the Version: the
Version's spec, generation and phase are untouched; the one-unfinished-Operation-per-resource
index makes a second check (or an update or delete) of it ``resource_busy`` while one runs. The
reconcile (``workers.version_check.run_operation``, in the validation process under its per-Space
share) replays the Version in the sandbox against every live instance of the Worker's
DurableWorkflows and writes the outcome to ``observed.replayCheck`` (:func:`record_txn`), progress
to the Operation meanwhile (:func:`progress_txn`, shown as the Operation's ``progress``).

:func:`gate_txn` is the server-side deploy gate (``TAKOHOST_DEPLOY_REPLAY_GATE``, for the WorkerDeployments that opt in): an update of a
WorkerDeployment that adds weight to a Version without a passed check is ``409
replay_check_failed``. A passed check proves no incompatibility with the histories it replayed;
it never proves compatibility in general (docs/spec/durable-workflow.md: "Hostは…その互換性を一般に証明できない").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Sequence
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy import orm

from models import instances as inst_models
from models import resource_sql
from models import resources as res_models
from models.errors import DomainError
from services import acceptance, operations
from services.idempotency import KeyedRequest

KIND = "check"
#: How many non-compatible instances ``observed.replayCheck.divergent`` keeps.
MAX_LISTED = 100
#: ``terminal`` may ask for at most this many ended instances per workflow.
MAX_TERMINAL = 1000
_TERMINAL = ("complete", "errored", "terminated")
RESULTS = ("compatible", "diverged", "error", "not_checked")


class Totals(TypedDict):
    """Counts per result."""

    compatible: int
    diverged: int
    error: int
    not_checked: int


@dataclasses.dataclass(frozen=True)
class Target:
    """One instance to replay: its workflow (``name``, ``uid``, ``class_name``) and id."""

    workflow: str
    workflow_uid: str
    class_name: str
    instance_id: str
    status: str


def gate_applies(setting: str, *, space: str, deployment: str) -> bool:
    """Whether the server-side deploy gate covers WorkerDeployment ``deployment`` (its name) of
    ``space``, by the value of ``TAKOHOST_DEPLOY_REPLAY_GATE`` (docs/operations.md settings):

    - empty or ``0``/``false``/``no``: no Deployment (the default);
    - ``1``/``true``/``yes``/``*``: every Deployment;
    - otherwise a comma-separated list of ``SPACE/DEPLOYMENT`` entries, ``SPACE/*`` for every
      Deployment of one Space: the Deployments that opt in (the WorkerDeployment Form has no field
      for it, docs/spec/worker-forms.md#wf-deployment, so the opt-in is the operator's setting).

    Pure: no I/O."""
    value = setting.strip()
    if value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes", "*"):
        return True
    entries = {entry.strip() for entry in value.split(",") if entry.strip()}
    return f"{space}/{deployment}" in entries or f"{space}/*" in entries


def gate_enabled(*, space: str, deployment: str) -> bool:
    """:func:`gate_applies` with the process's ``TAKOHOST_DEPLOY_REPLAY_GATE``."""
    return gate_applies(os.environ.get("TAKOHOST_DEPLOY_REPLAY_GATE", ""), space=space, deployment=deployment)


def instance_timeout_s() -> float:
    """``TAKOHOST_REPLAY_CHECK_INSTANCE_TIMEOUT_S`` (default 10): seconds one instance's replay may take."""
    return float(os.environ.get("TAKOHOST_REPLAY_CHECK_INSTANCE_TIMEOUT_S") or 10.0)


def total_timeout_s() -> float:
    """``TAKOHOST_REPLAY_CHECK_TOTAL_TIMEOUT_S`` (default 300): seconds for a whole check; the
    instances left are ``not_checked``."""
    return float(os.environ.get("TAKOHOST_REPLAY_CHECK_TOTAL_TIMEOUT_S") or 300.0)


def parse_request(body: dict | None) -> dict:
    """``{"terminal": N}`` (0 ≤ N ≤ :data:`MAX_TERMINAL`, default 0) from a request body.

    Raises:
        DomainError: ``invalid_request``.
    """
    body = body or {}
    unknown = set(body) - {"terminal"}
    if unknown:
        raise DomainError("invalid_request", f"unknown field(s) {', '.join(sorted(unknown))}; only 'terminal'")
    terminal = body.get("terminal", 0)
    if isinstance(terminal, bool) or not isinstance(terminal, int) or not 0 <= terminal <= MAX_TERMINAL:
        raise DomainError("invalid_request", f"terminal must be an integer from 0 to {MAX_TERMINAL}")
    return {"terminal": terminal}


def accept_check_txn(
    session: orm.Session,
    *,
    space: str,
    uid: str,
    idempotency: KeyedRequest,
    request: dict,
    now: dt.datetime,
) -> acceptance.Accepted:
    """Accept a check of WorkerVersion ``uid`` of ``space`` (``request`` from :func:`parse_request`).

    Raises:
        DomainError: ``not_found`` (no live resource ``uid`` in this Space, as everywhere),
            ``unsupported_form`` (not a WorkerVersion), ``idempotency_key_reused``, ``resource_busy``.
    """
    claim = acceptance.claim_txn(session, space=space, idempotency=idempotency, now=now)
    if claim.replay is not None:
        return claim.replay
    resource = acceptance.live_txn(session, space=space, uid=uid, lock="no_key_update")
    if resource.form != "WorkerVersion":
        raise DomainError("unsupported_form", f"only a WorkerVersion is checked, not a {resource.form}")
    op = claim.add_operation_txn(
        session, kind=KIND, resource_uid=uid, generation=resource.generation, request=request
    )
    acceptance.flush(session)
    return acceptance.Accepted(operation=op, new=True)


def targets_txn(session: orm.Session, *, version: res_models.Resource, terminal: int) -> list[Target]:
    """The instances a check of ``version`` replays: every non-terminal instance of each live
    DurableWorkflow of the Version's Worker, then the ``terminal`` most recently created ended
    ones of each, workflows by name, instances by creation."""
    workflows = session.scalars(
        sa.select(res_models.Resource)
        .where(
            res_models.Resource.form == "DurableWorkflow",
            res_models.Resource.worker_uid == version.worker_uid,
            res_models.Resource.space == version.space,
            res_models.Resource.deleted_at.is_(None),
        )
        .order_by(res_models.Resource.name)
    ).all()
    table = inst_models.Instance.__table__
    out: list[Target] = []
    for wf in workflows:
        columns = (table.c.instance_id, table.c.status)
        live = session.execute(
            sa.select(*columns).where(table.c.workflow_uid == wf.uid, table.c.status.not_in(_TERMINAL)).order_by(table.c.pk)
        ).all()
        ended: Sequence[Any] = []
        if terminal:
            ended = session.execute(
                sa.select(*columns)
                .where(table.c.workflow_uid == wf.uid, table.c.status.in_(_TERMINAL))
                .order_by(table.c.created_at.desc(), table.c.pk.desc())
                .limit(terminal)
            ).all()
        for row in [*live, *ended]:
            out.append(Target(wf.name, wf.uid, wf.spec["className"], row.instance_id, row.status))
    return out


def progress_txn(session: orm.Session, *, operation_id: str, progress: dict, now: dt.datetime) -> bool:
    """Record ``progress`` (``{"checked", "total", "totals"}``) on the running Operation and push its
    sweep time forward (the reconcile is alive); False when the Operation is no longer running."""
    op = resource_sql.lock_operation_txn(session, operation_id=operation_id, refresh=True)
    if op is None or op.state != operations.RUNNING:
        return False
    resource_sql.record_progress(op, progress=progress)
    resource_sql.postpone(op, next_attempt_at=now + operations.redispatch_after(), now=now)
    return True


def summary(*, operation_id: str, terminal: int, results: list[dict[str, Any]], now: dt.datetime) -> dict:
    """``observed.replayCheck``: ``{"operationId", "checkedAt", "terminal", "passed", "totals",
    "divergent": [first MAX_LISTED non-compatible results], "listed"}``; a result is
    ``{"workflow", "id", "status", "result", "message", "step"?, "expected"?, "found"?}``."""
    totals: Totals = {k: sum(1 for r in results if r["result"] == k) for k in RESULTS}  # type: ignore[assignment]
    bad = [r for r in results if r["result"] != "compatible"]
    return {
        "operationId": operation_id,
        "checkedAt": operations.rfc3339(now),
        "terminal": terminal,
        "passed": not bad,
        "totals": totals,
        "divergent": bad[:MAX_LISTED],
        "listed": min(len(bad), MAX_LISTED),
    }


def record_txn(session: orm.Session, *, version: res_models.Resource, check: dict) -> None:
    """Keep ``check`` (:func:`summary`) as the Version's ``observed.replayCheck`` (replacing the last)."""
    resource_sql.record_replay_check(version, check=check)


def gate_txn(session: orm.Session, *, deployment: res_models.Resource, spec: dict) -> None:
    """The server-side deploy gate (when :func:`gate_enabled` for this Deployment): every Version whose weight grows
    from ``deployment``'s current spec to ``spec`` must have a passed ``observed.replayCheck`` of
    its current generation's code (a check is dropped when the Version is re-validated).

    Raises:
        DomainError: ``replay_check_failed`` (409), ``details``: ``{"version", "reason": "missing"
            | "failed", "totals"?}``.
    """
    if not gate_enabled(space=deployment.space, deployment=deployment.name):
        return
    before = {v["version"]["resourceUid"]: v["weight"] for v in (deployment.spec or {}).get("versions", [])}
    for entry in spec.get("versions", []):
        uid = entry["version"]["resourceUid"]
        if entry["weight"] <= before.get(uid, 0):
            continue
        version = session.get(res_models.Resource, uid)
        check = ((version.observed if version is not None else None) or {}).get("replayCheck")
        if check is None:
            raise DomainError(
                "replay_check_failed",
                f"WorkerVersion {uid} has no replay check; run one (POST …/resources/{uid}/check) before giving it weight",
                {"version": uid, "reason": "missing"},
            )
        if not check.get("passed"):
            totals = check.get("totals") or {}
            raise DomainError(
                "replay_check_failed",
                f"WorkerVersion {uid} failed its replay check: {totals.get('diverged', 0)} instance(s) diverged, "
                f"{totals.get('error', 0) + totals.get('not_checked', 0)} not checked",
                {"version": uid, "reason": "failed", "totals": totals},
            )
