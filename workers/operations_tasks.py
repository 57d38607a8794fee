"""The reconcile of an accepted Operation: Celery task ``takohost.reconcile_operation`` (docs/spec/http-api.md#api-op).

Single runner: a reconcile first takes a Postgres session-level advisory lock named after the
Operation on a connection of its own. A second message for the same Operation (a sweep, a
redelivery) finds the lock taken and drops; a worker that dies (even by SIGKILL) loses its
connection and with it the lock, so the sweep's next message resumes the Operation. Every step
is idempotent against Postgres state: the final transaction re-reads the Operation ``FOR UPDATE``
and applies only while it is still unfinished.

Per Form (create/update → apply the accepted spec; delete → remove):

* ModuleWorker — nothing to apply.
* WorkerVersion — install its ``requirements`` as a layer (``workers.packages``; a pin that cannot
  be installed fails the Operation with the package error's code, e.g. ``sdist_only``, and
  ``details.package``), import the code in the sandbox against that layer
  (``workers.sandbox.validation.validate_spec``), record ``observed`` and the layer it uses; a failed
  import fails the Operation (``effect: partial``: the record exists with ``phase: failed``).
* WorkerVersion ``check`` — ``workers.version_check.run_operation`` (the replay check, docs/spec/host-features.md#hf-testing).
* WorkerDeployment — the accepted allocation becomes the applied one (``observed.versions``);
  every DurableWorkflow of the Worker is re-observed (``ready``).
* DurableWorkflow — ``observed`` from ``workflow_observer.observe_workflow_txn``; DELETE purges
  every instance first (``instance_stop.purge_workflow``) and stays ``running`` until that is
  proven.
* WorkerCronTrigger — ``cron_schedules.register_schedule_txn`` / ``unregister_schedule_txn``;
  DELETE (its schedule already unregistered and its deliveries fenced when it was accepted)
  stays ``running`` until no delivery of the trigger runs (``cron_tasks.deliveries_stopped``).

An unexpected error is retried (``MAX_ATTEMPTS`` times), then the Operation fails with
``effect: unknown``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import threading
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy import orm

from core import config
from models import db as models_db
from models import resource_sql
from models import resources as res_models
from models.base import utcnow
from models.errors import DomainError
from services import cron_schedules, dispatch, forms, instance_stop, operations, quotas, workflow_observer
from services import packages as package_records
from services import resources as resource_service
from services.celery_app import app
from services.telemetry import lifecycle
from workers import cron_tasks, packages, version_check
from workers.sandbox import validation as sandbox_validation

log = logging.getLogger(__name__)

DONE, BUSY, RETRY, FORWARD = "done", "busy", "retry", "forwarded"
MAX_ATTEMPTS = 5
#: Seconds before a reconcile that asked to retry (purge not proven yet, transient error) runs
#: again; short, so a Celery countdown is fine (docs/spec/architecture.md: never long ETAs). The sweep is the backstop.
RETRY_DELAY_S = 2.0


@app.task(name=dispatch.RECONCILE_OPERATION, bind=True, ignore_result=True)
def reconcile_operation(self, operation_id: str) -> str:  # noqa: ANN001 - Celery's bound task
    """Reconcile Operation ``operation_id`` once (the control process); re-queue itself shortly
    when asked to retry. A WorkerVersion create or update is handed to the validation process
    (``forwarded``): its import check runs tenant code, which must not hold the control plane."""
    started = utcnow()
    outcome = reconcile(operation_id)
    if outcome == FORWARD:
        dispatch.validate_version(operation_id)
        return outcome
    lifecycle.operation_reconciled(operation_id, since=started)
    if outcome == RETRY:
        self.apply_async(args=[operation_id], countdown=RETRY_DELAY_S)
    return outcome


@app.task(name=dispatch.VALIDATE_VERSION, bind=True, ignore_result=True)
def validate_version(self, operation_id: str) -> str:  # noqa: ANN001 - Celery's bound task
    """Reconcile WorkerVersion Operation ``operation_id``, its import check included (the
    validation process: ``services.celery_app.VALIDATION_TASKS``), under the per-Space share of
    the process's import checks (:class:`ValidationShare`): over it, ``deferred`` — the message
    is sent again after ``DEFER_DELAY_S`` and nothing runs now."""
    space = _operation_space(operation_id)
    settings = config.load_settings()
    if space is not None and not SHARE.enter(space, operation_id, slots=settings.validation_concurrency):
        # A message with an ETA is a deferred (or retried) one coming back: it keeps its chain going.
        if self.request.eta is not None or SHARE.defer(operation_id):
            self.apply_async(args=[operation_id], countdown=DEFER_DELAY_S)
        return DEFERRED
    try:
        started = utcnow()
        outcome = reconcile(operation_id, validate=True)
    finally:
        if space is not None:
            SHARE.leave(space, operation_id)
    lifecycle.operation_reconciled(operation_id, since=started)
    if outcome == RETRY:
        self.apply_async(args=[operation_id], countdown=RETRY_DELAY_S)
    return outcome


#: Outcome of a validation over its Space's share (sent again after ``DEFER_DELAY_S``).
DEFERRED = "deferred"
#: Seconds before a deferred validation's message comes back (a Celery countdown: short).
DEFER_DELAY_S = 0.5


class ValidationShare:
    """Fair share of one validation process's import checks between Spaces (docs/spec/host-features.md#hf-neighbours).

    The process runs ``slots`` checks at once (``settings.validation_concurrency``, Celery's
    threads pool); one Space runs at most ``slots - 1`` of them, so another Space's Version is
    checked at once beside a Space's slow imports (each bounded by ``TAKOHOST_VALIDATION_TIMEOUT_S``)
    instead of after them, first come first served. Per process, which is enough: every process
    keeps a check free for other Spaces. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, set[str]] = {}
        self._deferred: set[str] = set()

    def enter(self, space: str, operation_id: str, *, slots: int) -> bool:
        """Count ``operation_id``'s check against ``space``; False (nothing counted) when ``space``
        runs ``max(1, slots - 1)`` checks already."""
        with self._lock:
            running = self._running.setdefault(space, set())
            if len(running) >= max(1, slots - 1) and operation_id not in running:
                return False
            running.add(operation_id)
            self._deferred.discard(operation_id)
            return True

    def defer(self, operation_id: str) -> bool:
        """Note ``operation_id`` as deferred; False when a deferred message of it is already under
        way (this one is dropped: one chain per Operation, the sweep re-sends a lost one)."""
        with self._lock:
            if operation_id in self._deferred:
                return False
            self._deferred.add(operation_id)
            return True

    def leave(self, space: str, operation_id: str) -> None:
        """The check of ``operation_id`` is over."""
        with self._lock:
            running = self._running.get(space)
            if running is not None:
                running.discard(operation_id)
                if not running:
                    del self._running[space]


#: This process's share (the validation process's threads).
SHARE = ValidationShare()


def _operation_space(operation_id: str) -> str | None:
    """The Space of Operation ``operation_id``'s resource (``None``: no such Operation)."""
    with models_db.session_scope() as session:
        return session.scalar(
            sa.select(res_models.Resource.space)
            .join(res_models.Operation, res_models.Operation.resource_uid == res_models.Resource.uid)
            .where(res_models.Operation.id == operation_id)
        )


def reconcile(operation_id: str, *, validate: bool = False) -> str:
    """Run the reconcile of ``operation_id`` if no one else is; returns ``done``, ``busy``,
    ``retry``, or ``forwarded``: a WorkerVersion create/update and not ``validate`` (nothing was
    changed; the caller sends it to the validation process)."""
    engine = models_db.get_engine(config.load_settings().database_url)
    with operation_lock(engine, operation_id) as held:
        if not held:
            return BUSY
        try:
            return _reconcile_locked(operation_id, validate=validate)
        except Exception as exc:  # a host problem, not a rule: retry, then give up as "unknown"
            log.exception("reconcile failed", extra={"operation": operation_id})
            return _record_unexpected(operation_id, exc)


@contextlib.contextmanager
def operation_lock(engine: sa.Engine, operation_id: str) -> Iterator[bool]:
    """Hold the advisory lock of ``operation_id`` on a dedicated connection; yields whether we got it."""
    key = int.from_bytes(
        hashlib.sha256(f"operation:{operation_id}".encode()).digest()[:8], "big", signed=True
    )
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        held = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())
        try:
            yield held
        finally:
            if held:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    except BaseException:
        conn.invalidate()  # never return a connection that may still hold the lock to the pool
        raise
    finally:
        conn.close()


def _reconcile_locked(operation_id: str, *, validate: bool) -> str:
    now = utcnow()
    with models_db.session_scope() as session:
        op = resource_sql.lock_operation_txn(session, operation_id=operation_id, refresh=False)
        if op is None or op.state not in operations.UNFINISHED:
            return DONE
        resource = session.get(res_models.Resource, op.resource_uid)
        assert resource is not None  # an Operation's resource row is never deleted, only marked
        if resource.form == "WorkerVersion" and op.kind != "delete" and not validate:
            return FORWARD
        operations.set_state(op, operations.RUNNING, now=now)
        resource_sql.postpone(op, next_attempt_at=now + operations.redispatch_after())
        form, kind, spec, uid, space = resource.form, op.kind, resource.spec, resource.uid, resource.space
    log.info("reconciling", extra={"operation": operation_id, "form": form, "kind": kind, "resource": uid})
    if kind == "delete":
        return _apply_delete(operation_id, form=form, uid=uid)
    if kind == "check":  # a replay check of the Version (services.replay_checks): tenant code, in this process
        return version_check.run_operation(operation_id)
    layer: packages.installer.Layer | None = None
    refused: packages.PackageError | DomainError | None = None
    if form == "WorkerVersion":
        try:
            layer = packages.layer_for_spec(spec)
        except packages.PackageError as exc:
            refused = exc
    if layer is not None and not package_records.space_uses_layer(space, layer.key):
        try:
            quotas.check_layer_bytes(space, adding=layer.size_bytes)
        except DomainError as exc:  # the layer stays installed (shared, swept when unused)
            layer, refused = None, exc
    validation = None
    if form == "WorkerVersion" and refused is None:
        validation = sandbox_validation.validate_spec(
            spec, space=space, packages=None if layer is None else layer.name
        )
    with _running(operation_id) as held:
        if held is None:
            return DONE
        session, op, resource, now = held
        if refused is not None:  # nothing was installed: the Version is failed, like a bad import
            resource_sql.settle(resource, phase="failed", observed={"validated": False, "error": refused.message}, now=now)
            if isinstance(refused, DomainError):  # a quota
                error = refused
            else:
                details = {"package": refused.package} if refused.package else None
                error = DomainError(refused.code, refused.message, details)
            operations.set_state(op, operations.FAILED, now=now, effect="partial", error=error)
            return DONE
        if layer is not None:
            package_records.record_version_layer_txn(
                session,
                version_uid=resource.uid,
                space=resource.space,
                key=layer.key,
                requirements=list(layer.requirements),
                packages=list(layer.packages),
                size_bytes=layer.size_bytes,
            )
        if validation is not None and validation.error is not None:
            resource_sql.settle(resource, phase="failed", observed=validation.observed, now=now)
            operations.set_state(
                op,
                operations.FAILED,
                now=now,
                effect="partial",
                error=DomainError("validation_failed", validation.error),
            )
            return DONE
        observed: dict | None = None  # another Form's observed is kept
        if validation is not None:
            observed = validation.observed
        elif form == "WorkerDeployment":
            observed = {"versions": resource.spec["versions"]}
            resource_service.replace_refs_txn(
                session, source_uid=resource.uid, refs=forms.references(form, resource.spec)
            )
        elif form == "DurableWorkflow":
            observed = workflow_observer.observe_workflow_txn(
                session, workflow=resource, ready=forms.workflow_ready_txn(session, workflow=resource)
            )
        elif form == "WorkerCronTrigger":
            observed = cron_schedules.register_schedule_txn(session, trigger=resource, now=now)
        resource_sql.settle(resource, phase="idle", observed=observed, now=now)
        _succeed_txn(session, op, resource, now=now)
    return DONE


def _apply_delete(operation_id: str, *, form: str, uid: str) -> str:
    if (form == "DurableWorkflow" and not instance_stop.purge_workflow(uid, now=utcnow())) or (
        form == "WorkerCronTrigger" and not cron_tasks.deliveries_stopped(uid, now=utcnow())
    ):
        with _running(operation_id) as held:
            if held is not None:
                _, op, _, now = held
                operations.set_state(op, operations.RUNNING, now=now)
                resource_sql.postpone(op, next_attempt_at=now + operations.redispatch_after())
        return RETRY
    with _running(operation_id) as held:
        if held is None:
            return DONE
        session, op, resource, now = held
        if form == "WorkerCronTrigger":
            cron_schedules.unregister_schedule_txn(session, trigger_uid=uid, now=now)
        resource_sql.mark_deleted(resource, now=now)
        if form == "WorkerVersion":
            quotas.release_version_txn(session, space=resource.space, spec=resource.spec)
        resource_sql.drop_refs_txn(session, source_uid=uid)
        _succeed_txn(session, op, resource, now=now)
    return DONE


@contextlib.contextmanager
def _running(
    operation_id: str,
) -> Iterator[tuple[orm.Session, res_models.Operation, res_models.Resource, dt.datetime] | None]:
    """A transaction holding the Operation (locked afresh) and its resource: ``(session, op,
    resource, now)``, or None (nothing held) when the Operation is no longer unfinished. It
    commits when the ``with`` block ends normally."""
    with models_db.session_scope() as session:
        op = resource_sql.lock_operation_txn(session, operation_id=operation_id, refresh=True)
        if op is None or op.state not in operations.UNFINISHED:
            yield None
            return
        resource = resource_sql.lock_operated_txn(session, uid=op.resource_uid)
        assert resource is not None  # an Operation's resource row is never deleted, only marked
        yield session, op, resource, utcnow()


def _succeed_txn(
    session: orm.Session, op: res_models.Operation, resource: res_models.Resource, *, now: dt.datetime
) -> None:
    """``op`` succeeded; a WorkerDeployment's change (applied or deleted) re-observes every
    DurableWorkflow of its Worker (``ready``)."""
    operations.set_state(op, operations.SUCCEEDED, now=now)
    if resource.form == "WorkerDeployment" and resource.worker_uid is not None:
        session.flush()
        observe_workflows_txn(session, worker_uid=resource.worker_uid, now=now)


def observe_workflows_txn(session: orm.Session, *, worker_uid: str, now: dt.datetime) -> int:
    """Re-observe every live DurableWorkflow of ``worker_uid`` (its Deployment changed); returns how many."""
    workflows = session.scalars(
        sa.select(res_models.Resource).where(res_models.is_live("DurableWorkflow", worker_uid=worker_uid))
    ).all()
    for workflow in workflows:
        if workflow.observed_at is None and workflow.phase == "reconciling":
            continue  # its own create reconcile will observe it
        observed = workflow_observer.observe_workflow_txn(
            session, workflow=workflow, ready=forms.workflow_ready_txn(session, workflow=workflow)
        )
        resource_sql.observe(workflow, observed=observed, now=now)
    return len(workflows)


def _record_unexpected(operation_id: str, exc: Exception) -> str:
    """Count an unexpected failure; fail the Operation with ``effect: unknown`` after MAX_ATTEMPTS."""
    with _running(operation_id) as held:
        if held is None:
            return DONE
        _, op, resource, now = held
        if resource_sql.count_attempt(op) < MAX_ATTEMPTS:
            resource_sql.postpone(op, next_attempt_at=now + operations.redispatch_after(), now=now)
            return RETRY
        message = f"the host could not reconcile this Operation ({type(exc).__name__}); its effect is unknown"
        operations.set_state(
            op, operations.FAILED, now=now, effect="unknown", error=DomainError("internal_error", message)
        )
        if resource is not None and resource.deleted_at is None:
            resource_sql.mark_failed(resource, now=now)
    return DONE
