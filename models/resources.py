"""Spaces, tokens, resources, Operations and idempotency records (docs/spec/http-api.md)."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, JSONText, UTCDateTime, utcnow


class Space(Base):
    """A tenant namespace; every resource lives in exactly one Space (API-auth)."""

    __tablename__ = "spaces"

    name: Mapped[str] = mapped_column(sa.String(63), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Token(Base):
    """A bearer token, stored as its SHA-256 hex digest, granting one Space (API-auth)."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    space: Mapped[str] = mapped_column(sa.ForeignKey("spaces.name", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class ConsoleSession(Base):
    """A web-console sign-in (docs/spec/host-features.md#hf-neighbours): the browser holds a random session id, this row
    its SHA-256 (``id_hash``), the token it was made from (deleting the token deletes its
    sessions), the session's own CSRF token, and when it began and was last used (idle timeout
    and absolute lifetime: ``services.console_sessions``)."""

    __tablename__ = "console_sessions"

    id_hash: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    token_id: Mapped[int] = mapped_column(sa.ForeignKey("tokens.id", ondelete="CASCADE"), index=True)
    csrf: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


LIVE = sa.text("deleted_at IS NULL")
LIVE_DEPLOYMENT = sa.text("deleted_at IS NULL AND form = 'WorkerDeployment'")


class Resource(Base):
    """One Takoform resource of any of the five Forms (docs/spec/http-api.md#api-res).

    ``form`` holds the short Form name (``ModuleWorker``, ``WorkerVersion``,
    ``WorkerDeployment``, ``DurableWorkflow``, ``WorkerCronTrigger``). ``worker_uid`` is the
    referenced ModuleWorker (null for a Worker itself) so that dependency checks are one
    indexed query. A deleted resource keeps its row with ``deleted_at`` set (its UID is never
    reused) and frees its name.
    """

    __tablename__ = "resources"
    __table_args__ = (
        sa.Index("uq_resources_live_name", "space", "name", unique=True, postgresql_where=LIVE),
        sa.Index(
            "uq_resources_live_deployment",
            "worker_uid",
            unique=True,
            postgresql_where=LIVE_DEPLOYMENT,
        ),
        sa.Index("ix_resources_space_form", "space", "form", "created_at"),
    )

    uid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    space: Mapped[str] = mapped_column(sa.ForeignKey("spaces.name", ondelete="CASCADE"))
    form: Mapped[str] = mapped_column(sa.String(32))
    name: Mapped[str] = mapped_column(sa.String(63))
    generation: Mapped[int] = mapped_column(sa.Integer, default=1)
    spec: Mapped[dict] = mapped_column(JSONText)
    private_inputs: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    observed: Mapped[dict] = mapped_column(JSONText, default=dict)
    observed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    output: Mapped[dict] = mapped_column(JSONText, default=dict)
    phase: Mapped[str] = mapped_column(sa.String(16), default="reconciling")
    worker_uid: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    latest_operation_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


def is_live(
    form: str, *, space: str | None = None, uid: str | None = None, worker_uid: str | None = None
) -> sa.ColumnElement[bool]:
    """The ``WHERE`` condition "a live (not deleted) resource of ``form``", narrowed to ``space``,
    ``uid`` and ``worker_uid`` where they are given (``None``: not narrowed, never ``IS NULL``).
    Callers add their own ordering, locks and further conditions (``phase``, ``uid IN``, …)."""
    conditions = [Resource.form == form, Resource.deleted_at.is_(None)]
    if space is not None:
        conditions.append(Resource.space == space)
    if uid is not None:
        conditions.append(Resource.uid == uid)
    if worker_uid is not None:
        conditions.append(Resource.worker_uid == worker_uid)
    return sa.and_(*conditions)


ACTIVE_OPERATION = sa.text("state IN ('pending', 'running')")


class Operation(Base):
    """An accepted mutation, reconciled by a worker task (docs/spec/http-api.md#api-op, API-op).

    At most one unfinished Operation per resource: the partial unique index decides
    ``resource_busy``, not a check in Python. ``request`` holds what the reconciler applies
    (the new spec for an update). ``attempts`` counts reconcile runs that ended in an
    unexpected error; ``next_attempt_at`` is when the sweep re-dispatches the Operation if it is
    still unfinished (a lost message, a dead worker, or a reconcile asked to retry later).
    """

    __tablename__ = "operations"
    __table_args__ = (
        sa.Index(
            "uq_operations_active_resource",
            "resource_uid",
            unique=True,
            postgresql_where=ACTIVE_OPERATION,
        ),
        sa.Index("ix_operations_state", "state", "updated_at"),
    )

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    space: Mapped[str] = mapped_column(sa.ForeignKey("spaces.name", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(sa.String(8))
    resource_uid: Mapped[str] = mapped_column(sa.ForeignKey("resources.uid"))
    generation: Mapped[int] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    effect: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    error: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    request: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class ResourceRef(Base):
    """One ``{"resourceUid"}`` reference held by a live resource's spec (docs/spec/http-api.md#api-auth, docs/spec/worker-forms.md).

    ``kind`` says which field holds it: ``worker`` (any Form's ``worker``), ``version`` (a
    Deployment's weighted Version), ``binding`` (a Version's ``workflowBindings[].resource``).
    Rows are replaced when the referring spec is replaced and removed when the referrer is
    deleted, so "is anything still referring to X" is one indexed query (Worker, Version and
    DurableWorkflow DELETE rules).
    """

    __tablename__ = "resource_refs"
    __table_args__ = (sa.Index("ix_resource_refs_target", "target_uid", "kind"),)

    source_uid: Mapped[str] = mapped_column(
        sa.ForeignKey("resources.uid", ondelete="CASCADE"), primary_key=True
    )
    target_uid: Mapped[str] = mapped_column(
        sa.ForeignKey("resources.uid", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(sa.String(16), primary_key=True)


class IdempotencyRecord(Base):
    """What an ``Idempotency-Key`` of a Space was first used for (API-op).

    ``request_hash`` is the SHA-256 of method, path and the canonical JSON body; the same
    key with another hash is ``idempotency_key_reused``. ``operation_id`` names the Operation
    a mutation created; for calls answered directly (send_event) ``response_status`` and
    ``response_body`` replay the first answer. Kept at least 30 days.
    """

    __tablename__ = "idempotency_keys"

    space: Mapped[str] = mapped_column(sa.ForeignKey("spaces.name", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(sa.String(64))
    operation_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    response_status: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    response_body: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
