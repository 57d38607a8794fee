"""What every DurableWorkflow instance call starts with: check its arguments, find its rows, lock.

Shared by ``instances`` (create/get/status/list), ``instance_events`` (sendEvent, inbox),
``instance_history`` and ``instance_stop`` (terminate, DELETE purge), the one code path of HTTP
(docs/spec/http-api.md#api-inst) and bindings (§4.5):

* argument checks: :func:`id_or_error` (an instance id or event type; ``invalid_request``,
  docs/spec/host-limits.md#hl-decisions) and :func:`document_or_error` (a params/payload document; ``ABSENT`` when omitted);
* row lookups in the caller's transaction: :func:`workflow_txn` (``not_found``),
  :func:`instance_txn` (``unknown_instance``) and both in that order, :func:`workflow_instance_txn`;
* :func:`rfc3339`, the time format of every instance answer.

Domain failures are ``models.errors.DomainError`` with docs/spec/http-api.md#api-errors codes. Helpers
suffixed ``_txn`` run in the caller's transaction and never commit (docs/spec/house-rules.md#hr-txn). This
module must not import ``workers.engine`` (the API imports it).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from models import instance_sql
from models import instances as inst_models
from models import resources as res_models
from models.errors import DomainError
from takohost.domain import documents, history, identifiers


class _Absent:
    """Marks an optional document that was not given at all (docs/spec/durable-workflow.md#dw-doc: only an absent document is "none")."""

    def __repr__(self) -> str:
        return "ABSENT"


#: An omitted ``params``/``payload`` (an explicit ``None`` over HTTP is ``invalid_params``).
ABSENT: Any = _Absent()


rfc3339 = history.rfc3339


def id_or_error(value: object, *, what: str) -> str:
    """``value`` as a valid scalar id string (an instance id, an event type).

    Raises DomainError ``invalid_request`` when it is not one (``what`` names it in the message).
    """
    try:
        return identifiers.validate_scalar_string(value, what=what)
    except TypeError as exc:
        raise DomainError("invalid_request", str(exc)) from None


def document_or_error(value: object, *, what: str) -> bytes | None:
    """Canonical bytes of a params/payload value; ``ABSENT`` → ``None`` (no document).

    Raises DomainError ``invalid_params`` (with the JSON ``pointer`` of the offending part) or
    ``document_too_large``; ``what`` names the value in the message.
    """
    if value is ABSENT:
        return None
    try:
        return documents.canonical_document(value, allow_none=False)
    except documents.InvalidDocument as exc:
        raise DomainError(
            "invalid_params", f"{what} is not a document: {exc}", {"pointer": exc.pointer}
        ) from None
    except documents.DocumentTooLargeError as exc:
        raise DomainError("document_too_large", f"{what}: {exc}") from None


def workflow_txn(session: orm.Session, *, space: str, workflow_uid: str) -> res_models.Resource:
    """The live DurableWorkflow ``workflow_uid`` of ``space`` (else ``404 not_found``)."""
    workflow = session.scalar(
        sa.select(res_models.Resource).where(res_models.is_live("DurableWorkflow", space=space, uid=workflow_uid))
    )
    if workflow is None:
        raise DomainError("not_found", "no such DurableWorkflow in this Space")
    return workflow


def instance_txn(
    session: orm.Session, *, workflow_uid: str, instance_id: str, lock: bool = False
) -> inst_models.Instance:
    """The instance row (``FOR UPDATE`` when ``lock``), else ``404 unknown_instance``."""
    query = sa.select(inst_models.Instance).where(
        inst_models.Instance.workflow_uid == workflow_uid,
        inst_models.Instance.instance_id == instance_id,
    )
    if lock:
        query = query.with_for_update()
    instance = session.scalar(query)
    if instance is None:
        raise DomainError("unknown_instance", "no such instance (unknown, or no longer retained)")
    return instance


def workflow_instance_txn(
    session: orm.Session, *, space: str, workflow_uid: str, instance_id: str, lock: bool = False
) -> inst_models.Instance:
    """The instance ``instance_id`` of the live DurableWorkflow ``workflow_uid`` of ``space``
    (``FOR UPDATE`` when ``lock``), what every call on one instance looks up: ``404 not_found``
    when there is no such DurableWorkflow (checked first, :func:`workflow_txn`), else ``404
    unknown_instance`` when it has no such instance (:func:`instance_txn`)."""
    workflow_txn(session, space=space, workflow_uid=workflow_uid)
    return instance_txn(session, workflow_uid=workflow_uid, instance_id=instance_id, lock=lock)


def delete_instances_txn(session: orm.Session, pks: list[int]) -> None:
    """Delete the instances ``pks`` and every row that hangs off them (history, steps, inbox,
    timers), in ``session``'s transaction, one statement (``instance_sql.DELETE_INSTANCES``):
    retention's purge and a workflow's deletion share it."""
    session.connection().exec_driver_sql(instance_sql.DELETE_INSTANCES, {"pks": list(pks)})
