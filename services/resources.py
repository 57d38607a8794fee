"""Accepting resource mutations, and reading resources (docs/spec/http-api.md#api-res, docs/spec/http-api.md#api-op).

Every mutation is accepted in **one** transaction (the steps it shares with a Version's check are
``services.acceptance``; ``Accepted`` is that module's) that (1) claims the Idempotency-Key (a replay returns the
first Operation, whatever happened since), (2) runs every rule of ``services.forms`` before any write, (3)
writes the resource change, its references and a ``pending`` Operation. The caller commits, then dispatches
the reconcile (docs/spec/house-rules.md#hr-txn). Unique indexes decide the races: ``uq_resources_live_name``
and ``uq_resources_live_deployment`` → ``409 name_conflict``, ``uq_operations_active_resource``
→ ``409 resource_busy``.

The accepted spec and generation are visible at once; the reconcile task
(``workers.operations_tasks``) applies them, fills ``observed`` and settles ``phase``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import orm

from models import resource_sql
from models import resources as res_models
from models.errors import DomainError
from services import acceptance, cron_schedules, forms, ids, instance_pages, quotas, replay_checks
from services.acceptance import Accepted
from services.idempotency import KeyedRequest

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


def accept_create_txn(
    session: orm.Session,
    *,
    space: str,
    idempotency: KeyedRequest,
    form: str,
    name: str,
    spec: dict,
    now: dt.datetime,
) -> Accepted:
    """Accept ``POST …/resources`` for a schema-valid ``spec`` of ``form`` (short name).

    Raises:
        DomainError: ``idempotency_key_reused``, ``reference_not_found``, ``dependency_conflict``,
            ``resource_busy``, ``name_conflict``, ``quota_exceeded`` (a WorkerVersion whose sources
            do not fit in the Space's ``versionCodeBytes`` quota; ``services.quotas``).
    """
    claim = acceptance.claim_txn(session, space=space, idempotency=idempotency, now=now)
    if claim.replay is not None:
        return claim.replay
    refs = forms.references(form, spec)
    resolved = forms.resolve_refs_txn(session, space=space, refs=refs)
    forms.check_create_txn(session, form=form, spec=spec, resolved=resolved)
    if form == "WorkerVersion":
        quotas.charge_version_txn(session, space=space, spec=spec)
    uid = ids.new_id()
    resource_sql.add_resource_txn(
        session,
        uid=uid,
        space=space,
        form=form,
        name=name,
        spec=spec,
        operation_id=claim.operation_id,
        worker_uid=spec["worker"]["resourceUid"] if "worker" in spec else None,
        now=now,
    )
    acceptance.flush(session)
    op = claim.add_operation_txn(
        session, kind="create", resource_uid=uid, generation=1, request={"spec": spec}
    )
    acceptance.flush(session)
    replace_refs_txn(session, source_uid=uid, refs=refs)
    return Accepted(operation=op, new=True)


def accept_update_txn(
    session: orm.Session,
    *,
    space: str,
    uid: str,
    idempotency: KeyedRequest,
    body: dict,
    validate: Callable[[dict, str], dict],
    now: dt.datetime,
) -> Accepted:
    """Accept ``PUT …/resources/{uid}`` (whole replacement). ``validate(body, form)`` checks the
    body against the schema of the resource's Form (short name) and returns the new spec; it runs
    after the key is claimed, so a replay answers even once the resource is gone. An identical
    spec still makes a new Operation and generation (docs/spec/http-api.md#api-op).

    Raises:
        DomainError: ``not_found``, ``idempotency_key_reused``, ``invalid_spec``, ``immutable_field``,
            ``reference_not_found``, ``dependency_conflict``, ``resource_busy``.
    """
    claim = acceptance.claim_txn(session, space=space, idempotency=idempotency, now=now)
    if claim.replay is not None:
        return claim.replay
    resource = acceptance.live_txn(session, space=space, uid=uid, lock="no_key_update")
    form = resource.form
    spec = validate(body, form)
    forms.check_immutable(resource, spec)
    refs = forms.references(form, spec)
    resolved = forms.resolve_refs_txn(session, space=space, refs=refs)
    forms.check_update_txn(session, resource=resource, spec=spec, resolved=resolved)
    if form == "WorkerDeployment":
        replay_checks.gate_txn(session, deployment=resource, spec=spec)
    generation = resource.generation + 1
    op = claim.add_operation_txn(
        session, kind="update", resource_uid=uid, generation=generation, request={"spec": spec}
    )
    acceptance.flush(session)
    if form == "WorkerDeployment":
        # The applied allocation keeps serving until the reconcile finishes: keep its Versions
        # referenced (so they cannot be deleted) until then.
        applied = {"versions": (resource.observed or {}).get("versions", [])}
        refs = refs + [
            r
            for r in forms.references(form, {"versions": applied["versions"]})
            if r.target_uid not in {x.target_uid for x in refs}
        ]
    # A WorkerVersion is re-validating: unverified until the reconcile records the outcome (§3.2).
    resource_sql.accept_update(
        resource,
        spec=spec,
        generation=generation,
        operation_id=claim.operation_id,
        revalidate=form == "WorkerVersion",
        now=now,
    )
    replace_refs_txn(session, source_uid=uid, refs=refs)
    acceptance.flush(session)
    return Accepted(operation=op, new=True)


def accept_delete_txn(
    session: orm.Session, *, space: str, uid: str, idempotency: KeyedRequest, now: dt.datetime
) -> Accepted:
    """Accept ``DELETE …/resources/{uid}``; the reconcile removes it (and, for a DurableWorkflow,
    stops and purges its instances first).

    Raises:
        DomainError: ``not_found``, ``idempotency_key_reused``, ``dependency_conflict``, ``resource_busy``.
    """
    claim = acceptance.claim_txn(session, space=space, idempotency=idempotency, now=now)
    if claim.replay is not None:
        return claim.replay
    resource = acceptance.live_txn(session, space=space, uid=uid, lock="update")
    forms.check_delete_txn(session, resource=resource)
    op = claim.add_operation_txn(
        session, kind="delete", resource_uid=uid, generation=resource.generation, request=None
    )
    acceptance.flush(session)
    resource_sql.accept_delete(resource, operation_id=claim.operation_id, now=now)
    if resource.form == "WorkerCronTrigger":
        # The match boundary is the acceptance (docs/spec/cron-trigger.md "解除前後の一致境界"): no match after it is
        # recorded, even while no worker is free to run the reconcile. ``phase = "deleting"`` is
        # also the fence that running deliveries of this trigger watch (``cron_runs``).
        cron_schedules.unregister_schedule_txn(session, trigger_uid=uid, now=now)
    acceptance.flush(session)
    return Accepted(operation=op, new=True)


def replace_refs_txn(session: orm.Session, *, source_uid: str, refs: list[forms.Ref]) -> None:
    """Make ``resource_refs`` of ``source_uid`` exactly ``refs`` (deduplicated;
    ``models.resource_sql.replace_refs_txn``)."""
    resource_sql.replace_refs_txn(session, source_uid=source_uid, refs=[(ref.target_uid, ref.kind) for ref in refs])


# --- reading ------------------------------------------------------------------------------------


def get_txn(session: orm.Session, *, space: str, uid: str) -> res_models.Resource:
    """The live resource ``uid`` of ``space``.

    Raises:
        DomainError: ``not_found`` (unknown, another Space's, or deleted).
    """
    resource = session.scalar(
        sa.select(res_models.Resource).where(
            res_models.Resource.uid == uid,
            res_models.Resource.space == space,
            res_models.Resource.deleted_at.is_(None),
        )
    )
    if resource is None:
        raise DomainError("not_found", f"no resource {uid!r} in this Space")
    return resource


def list_txn(
    session: orm.Session,
    *,
    space: str,
    form: str | None,
    page: instance_pages.PageRequest = instance_pages.FIRST_PAGE,
) -> tuple[list[res_models.Resource], str | None]:
    """One page of live resources of ``space`` (optionally of short Form ``form``), oldest first:
    the page after ``page.token``, of ``page.limit`` resources (``None``: ``DEFAULT_PAGE_SIZE``).

    Returns ``(resources, next_page_token or None)``. The token is opaque: unpadded URL-safe
    base64 of the JSON ``[createdAt (ISO 8601, UTC), uid]`` of the page's last row.

    Raises:
        DomainError: ``invalid_request`` for a ``limit`` outside 1..``MAX_PAGE_SIZE`` or a
            ``page.token`` this API did not issue (docs/spec/http-api.md#api-errors: a bad query parameter is a
            bad request; ``invalid_params`` is for documents).
    """
    limit = DEFAULT_PAGE_SIZE if page.limit is None else page.limit
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE_SIZE:
        raise DomainError("invalid_request", f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    query = sa.select(res_models.Resource).where(
        res_models.Resource.space == space, res_models.Resource.deleted_at.is_(None)
    )
    if form is not None:
        query = query.where(res_models.Resource.form == form)
    if page.token is not None:
        after_time, after_uid = decode_page_token(page.token)
        query = query.where(
            sa.or_(
                res_models.Resource.created_at > after_time,
                sa.and_(res_models.Resource.created_at == after_time, res_models.Resource.uid > after_uid),
            )
        )
    rows = list(
        session.scalars(
            query.order_by(res_models.Resource.created_at, res_models.Resource.uid).limit(limit + 1)
        ).all()
    )
    next_token = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_token = encode_page_token(rows[-1].created_at, rows[-1].uid)
    return rows, next_token


def encode_page_token(created_at: dt.datetime, uid: str) -> str:
    """The page token after the row ``(created_at, uid)`` (``created_at`` aware; stored as UTC)."""
    raw = json.dumps([created_at.astimezone(dt.UTC).isoformat(), uid]).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_page_token(token: str) -> tuple[dt.datetime, str]:
    """The ``(created_at, uid)`` position of a token :func:`encode_page_token` made; pure.

    A token is accepted only if it is exactly what :func:`encode_page_token` writes for its
    decoded position (so no other spelling, offset, padding or whitespace), the time is aware
    and in range, and the UID has the host's shape — so nothing a client invents reaches the
    database (an out-of-range offset overflowed, a U+0000 broke the query: both were 500s).

    Raises:
        DomainError: ``invalid_request``.
    """
    bad = DomainError("invalid_request", "pageToken is not a token this API issued")
    if type(token) is not str or not 0 < len(token) <= 512 or not token.isascii():
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created, uid = json.loads(raw.decode("utf-8"))
        if type(created) is not str or not ids.is_host_id(uid):
            raise ValueError("bad token")
        moment = dt.datetime.fromisoformat(created)
        if moment.tzinfo is None:
            raise ValueError("bad token")
        if encode_page_token(moment, uid) != token:
            raise ValueError("not a token this API wrote")
        return moment.astimezone(dt.UTC), uid
    except (ValueError, TypeError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise bad from None
