"""Shared helpers of the cron tests: a Worker/Version/Deployment/Trigger stack written straight
into the database (docs/spec/worker-forms.md shapes), its schedule registered with ``register_schedule_txn``.

Synthetic clocks of integration tests live in 2030, after the real clock, so a real beat
process running in the same test session never decides their matches.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import sqlalchemy as sa

from models import cron as cron_models
from models import db as models_db
from models import resources as res_models
from services import cron_schedules

#: Handler that checks its event against ``env.EXPECTED`` (when given) and succeeds.
OK_HANDLER = """
def scheduled(event, env, ctx):
    expected = getattr(env, "EXPECTED", None)
    if expected is not None and (event != expected or type(event["scheduledTime"]) is not int):
        raise AssertionError(f"unexpected event {event!r}")
"""
RAISING_HANDLER = 'def scheduled(event, env, ctx):\n    raise RuntimeError("boom")\n'


def at(text: str) -> dt.datetime:
    """Parse an RFC 3339 instant (``…Z`` allowed) into an aware datetime."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclasses.dataclass(frozen=True)
class Stack:
    """UIDs of one Worker with one Version, its Deployment and one Cron Trigger."""

    space: str
    worker_uid: str
    version_uid: str
    deployment_uid: str
    trigger_uid: str


def _resource(
    session, *, space: str, form: str, spec: dict, worker_uid: str | None, observed: dict, now: dt.datetime
) -> str:
    uid = str(uuid.uuid4())
    session.add(
        res_models.Resource(
            uid=uid,
            space=space,
            form=form,
            name=f"{form.lower()[:12]}-{uid[:8]}",
            spec=spec,
            observed=observed,
            observed_at=now,
            output={},
            phase="idle",
            worker_uid=worker_uid,
            created_at=now,
            updated_at=now,
        )
    )
    session.flush()
    return uid


def create_stack(
    db_url: str,
    *,
    space: str,
    cron: str,
    source: str = OK_HANDLER,
    variables: dict | None = None,
    now: dt.datetime | None = None,
    deployment: bool = True,
) -> Stack:
    """Write the four resources and register the trigger's schedule at ``now`` (default: real now)."""
    now = now or dt.datetime.now(dt.UTC)
    with models_db.session_scope(db_url) as session:
        worker = _resource(
            session, space=space, form="ModuleWorker", spec={}, worker_uid=None, observed={}, now=now
        )
        version = _resource(
            session,
            space=space,
            form="WorkerVersion",
            worker_uid=worker,
            now=now,
            spec={
                "worker": {"resourceUid": worker},
                "mainModule": "main.py",
                "modules": {"main.py": source},
                "vars": variables or {},
                "workflowBindings": [],
            },
            observed={"validated": True, "workflowClasses": [], "handlers": ["scheduled"]},
        )
        deployment_uid = ""
        if deployment:
            deployment_uid = _resource(
                session,
                space=space,
                form="WorkerDeployment",
                worker_uid=worker,
                now=now,
                observed={},
                spec={
                    "worker": {"resourceUid": worker},
                    "versions": [{"version": {"resourceUid": version}, "weight": 100}],
                },
            )
        trigger_uid = _resource(
            session,
            space=space,
            form="WorkerCronTrigger",
            worker_uid=worker,
            now=now,
            observed={},
            spec={"worker": {"resourceUid": worker}, "cron": cron},
        )
        trigger = session.get(res_models.Resource, trigger_uid)
        trigger.observed = cron_schedules.register_schedule_txn(session, trigger=trigger, now=now)
    return Stack(space, worker, version, deployment_uid, trigger_uid)


def update_cron(db_url: str, *, trigger_uid: str, cron: str, now: dt.datetime) -> dict:
    """Replace the trigger's spec with ``cron`` and re-register, as a PUT's reconcile does."""
    with models_db.session_scope(db_url) as session:
        trigger = session.get(res_models.Resource, trigger_uid)
        trigger.spec = {**trigger.spec, "cron": cron}
        trigger.generation += 1
        trigger.observed = cron_schedules.register_schedule_txn(session, trigger=trigger, now=now)
        return trigger.observed


def delete_trigger(db_url: str, *, trigger_uid: str, now: dt.datetime) -> None:
    """Mark the trigger deleted and unregister its schedule, as a DELETE's reconcile does."""
    with models_db.session_scope(db_url) as session:
        trigger = session.get(res_models.Resource, trigger_uid)
        trigger.deleted_at = now
        cron_schedules.unregister_schedule_txn(session, trigger_uid=trigger_uid, now=now)


def matches_of(db_url: str, trigger_uid: str) -> list[cron_models.CronMatch]:
    """The trigger's recorded matches, ascending by scheduled time."""
    with models_db.session_scope(db_url) as session:
        return list(
            session.scalars(
                sa.select(cron_models.CronMatch)
                .where(cron_models.CronMatch.trigger_uid == trigger_uid)
                .order_by(cron_models.CronMatch.scheduled_time)
            )
        )


def skips_of(db_url: str, trigger_uid: str) -> list[cron_models.CronSkip]:
    """The trigger's skip rows, ascending by scheduled time."""
    with models_db.session_scope(db_url) as session:
        return list(
            session.scalars(
                sa.select(cron_models.CronSkip)
                .where(cron_models.CronSkip.trigger_uid == trigger_uid)
                .order_by(cron_models.CronSkip.scheduled_time)
            )
        )


def deliveries_of(db_url: str, match_pk: int) -> list[cron_models.CronDelivery]:
    """The match's deliveries in start order."""
    with models_db.session_scope(db_url) as session:
        return list(
            session.scalars(
                sa.select(cron_models.CronDelivery)
                .where(cron_models.CronDelivery.match_pk == match_pk)
                .order_by(cron_models.CronDelivery.pk)
            )
        )


def test_create_stack_registers_a_ready_schedule(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T10:02:30Z"))
    with models_db.session_scope(db_url) as session:
        schedule = session.get(cron_models.CronSchedule, stack.trigger_uid)
        trigger = session.get(res_models.Resource, stack.trigger_uid)
    assert schedule.cron == "*/5 * * * *" and schedule.worker_uid == stack.worker_uid
    assert schedule.considered_until == at("2030-03-04T10:02:30Z")
    assert schedule.next_due_at == at("2030-03-04T10:05:00Z")
    assert trigger.observed["nextMatchAt"] == "2030-03-04T10:05:00Z"


def decide(
    db_url: str, *, now: dt.datetime, triggers: list[str], previous_tick: dt.datetime | None = None
) -> list[tuple[int, str]]:
    """One beat recording pass at ``now`` over ``triggers`` only; returns the newly recorded matches."""
    from beat import cron_recorder

    with models_db.session_scope(db_url) as session:
        _, recorded = cron_recorder.record_batch_txn(
            session,
            now=now,
            previous_tick=previous_tick or now - dt.timedelta(seconds=1),
            limit=500,
            trigger_uids=triggers,
        )
    return recorded
