"""The steps every accepted resource mutation shares (docs/spec/http-api.md#api-res, #api-op): the
Idempotency-Key claim (a :class:`Claim`, which also adds the ``pending`` Operation its key names),
the locked read of the live resource, the flush that names a unique-index race, and the
:class:`Accepted` answer.

Used by ``services.resources`` (create, update, delete) and ``services.replay_checks`` (a
Version's check), which both sit above this module: neither imports the other for these
(the import contract ``services-acceptance-below-its-users`` in ``.importlinter`` keeps it so).
Unique indexes decide the races: ``uq_resources_live_name`` and ``uq_resources_live_deployment``
→ ``409 name_conflict``, ``uq_operations_active_resource`` → ``409 resource_busy``
(docs/spec/house-rules.md#hr-errors).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from models import resource_sql
from models import resources as res_models
from models.errors import DomainError
from services import idempotency as idempotency_keys
from services import ids, operations

#: Constraint name → (code, message) for IntegrityErrors at acceptance (docs/spec/house-rules.md#hr-errors).
CONSTRAINT_ERRORS: dict[str, tuple[str, str]] = {
    "uq_resources_live_name": ("name_conflict", "a live resource with this name exists in this Space"),
    "uq_resources_live_deployment": (
        "name_conflict",
        "deployment exists: this Worker already has a live WorkerDeployment; update it instead",
    ),
    "uq_operations_active_resource": (
        "resource_busy",
        "another Operation on this resource is unfinished; retry when it has finished",
    ),
}


@dataclasses.dataclass(frozen=True)
class Accepted:
    """An accepted (or replayed) mutation: its Operation, and whether this request created it
    (``new``: the caller dispatches the reconcile after commit; a replay of an unfinished
    Operation is dispatched again, harmlessly)."""

    operation: res_models.Operation
    new: bool


@dataclasses.dataclass(frozen=True)
class Claim:
    """A mutation's claimed Idempotency-Key (:func:`claim_txn`): ``operation_id``, the id of the
    Operation the key's record names, in ``space``, accepted at ``now``. ``replay`` is the earlier
    call's :class:`Accepted` when the key had already answered: the caller returns it and writes
    nothing. Otherwise the caller runs its rules and adds the Operation with
    :meth:`add_operation_txn`."""

    space: str
    operation_id: str
    now: dt.datetime
    replay: Accepted | None

    def add_operation_txn(
        self, session: orm.Session, *, kind: str, resource_uid: str, generation: int, request: dict | None
    ) -> res_models.Operation:
        """Add to ``session`` the Operation the key names: ``kind`` (``create``, ``update``,
        ``delete``, ``check``) of resource ``resource_uid`` at ``generation``, with ``request``
        (``{"spec": …}``, a check's ``{"terminal": N}``, or None), ``pending`` and due for the
        sweep's re-dispatch ``services.operations.redispatch_after`` from ``now``. It is inserted
        at the caller's next :func:`flush`, where ``uq_operations_active_resource`` decides a race
        (``resource_busy``; docs/spec/http-api.md#api-op). Returns the row (the caller answers
        with it)."""
        return resource_sql.add_operation_txn(
            session,
            op_id=self.operation_id,
            space=self.space,
            kind=kind,
            resource_uid=resource_uid,
            generation=generation,
            state=operations.PENDING,
            request=request,
            next_attempt_at=self.now + operations.redispatch_after(),
            now=self.now,
        )


def claim_txn(
    session: orm.Session, *, space: str, idempotency: idempotency_keys.KeyedRequest, now: dt.datetime
) -> Claim:
    """Claim the Idempotency-Key of ``space`` that ``idempotency`` carries, for that request and a
    new Operation (its id is made here): a :class:`Claim` whose ``replay``
    is the earlier call's Accepted when the key already answered (docs/spec/http-api.md#api-op).

    Raises:
        DomainError: ``idempotency_key_reused``; ``resource_busy`` (a concurrent request with this
            key just rolled back; ``services.idempotency.claim_txn``).
    """
    op_id = ids.new_id()
    claim = idempotency_keys.claim_txn(session, space=space, request=idempotency, operation_id=op_id, now=now)
    replay = None if claim.new else _replay_txn(session, claim)
    return Claim(space=space, operation_id=op_id, now=now, replay=replay)


def _replay_txn(session: orm.Session, claim: idempotency_keys.Claim) -> Accepted:
    record = claim.record
    op = session.get(res_models.Operation, record.operation_id) if record and record.operation_id else None
    if op is None:
        raise DomainError(
            "idempotency_key_reused", "this Idempotency-Key was used for a call that made no Operation"
        )
    return Accepted(operation=op, new=False)


def live_txn(session: orm.Session, *, space: str, uid: str, lock: str) -> res_models.Resource:
    """The live resource ``uid`` of ``space``, read after its row is locked (``lock``: ``"update"``
    → ``FOR UPDATE``, for a delete; anything else → ``FOR NO KEY UPDATE``).

    Raises:
        DomainError: ``not_found``.
    """
    resource_sql.lock_resource_txn(session, uid=uid, mode="update" if lock == "update" else "no_key_update")
    resource = session.scalar(
        sa.select(res_models.Resource)
        .where(
            res_models.Resource.uid == uid,
            res_models.Resource.space == space,
            res_models.Resource.deleted_at.is_(None),
        )
        .execution_options(populate_existing=True)
    )
    if resource is None:
        raise DomainError("not_found", f"no resource {uid!r} in this Space")
    return resource


def flush(session: orm.Session) -> None:
    """Flush, turning a unique-index violation into its domain error (:data:`CONSTRAINT_ERRORS`,
    by constraint name); any other IntegrityError propagates."""
    try:
        session.flush()
    except sa_exc.IntegrityError as exc:
        name = constraint_name(exc)
        if name in CONSTRAINT_ERRORS:
            code, message = CONSTRAINT_ERRORS[name]
            raise DomainError(code, message) from None
        raise


def constraint_name(exc: sa_exc.IntegrityError) -> str | None:
    """The violated constraint's name, from the Postgres error's diagnostics (``None`` when the
    driver gave none)."""
    diag = getattr(exc.orig, "diag", None)
    return getattr(diag, "constraint_name", None)
