"""The Celery application shared by workers, beat and the API's dispatch (docs/spec/architecture.md#ar-shape).

Redis is the broker (and lease store); Postgres holds the truth, so a lost message is
recovered by a beat sweep, never by the broker. Tasks are acknowledged late and are all
idempotent against Postgres state. Every message carries ids only, re-read from Postgres; remote
control is off, so the broker carries work and nothing that steers the workers.
"""

from __future__ import annotations

from celery import Celery

from core import config
from services import broker, message_guard

#: Modules that define tasks; imported by worker processes only.
TASK_MODULES = ["workers.tasks"]

#: Tasks of the control plane (docs/spec/host-features.md#hf-newcomer): they run no tenant code and go to
#: :func:`control_queue`, which only the control process of every ``takohost worker`` consumes,
#: so an Operation never waits behind tenant code holding every slot. Everything else (replay
#: contexts, cron deliveries: tenant code) goes to ``Settings.queue``.
CONTROL_TASKS = frozenset({"takohost.reconcile_operation"})
#: The import check of a new WorkerVersion runs tenant code (up to
#: ``TAKOHOST_VALIDATION_TIMEOUT_S``): in the control process, one Space's slow imports held
#: every other Space's PUT and DELETE for 10 s each. It has a queue and a process of its own in
#: every ``takohost worker`` (:func:`validation_queue`).
VALIDATION_TASKS = frozenset({"takohost.validate_version"})


def control_queue(settings: config.Settings | None = None) -> str:
    """The control plane's queue: ``{namespace}.control`` beside ``{namespace}.tasks``."""
    settings = settings or config.load_settings()
    return settings.namespace + ".control"


def validation_queue(settings: config.Settings | None = None) -> str:
    """The WorkerVersion import checks' queue: ``{namespace}.validation``."""
    settings = settings or config.load_settings()
    return settings.namespace + ".validation"


def queue_for(task_name: str, *, celery: Celery | None = None) -> str:
    """The queue a message of ``task_name`` is sent to by ``celery`` (default: this module's app):
    ``CONTROL_TASKS`` → its control queue, ``VALIDATION_TASKS`` → its validation queue,
    everything else → its default queue."""
    conf = (celery or app).conf
    if task_name in CONTROL_TASKS:
        return conf.takohost_control_queue
    if task_name in VALIDATION_TASKS:
        return conf.takohost_validation_queue
    return conf.task_default_queue


def make_celery(settings: config.Settings | None = None) -> Celery:
    """Build the Celery app for ``settings`` (default: from the environment).

    Every Redis key of the broker is prefixed with ``{namespace}:`` and the only queue is
    ``settings.queue``, so several hosts or test sessions can share one Redis.
    """
    settings = settings or config.load_settings()
    app = Celery("takohost", broker=settings.broker_url, include=TASK_MODULES)
    app.conf.update(
        task_default_queue=settings.queue,
        takohost_control_queue=control_queue(settings),
        takohost_validation_queue=validation_queue(settings),
        task_routes={
            **{name: {"queue": control_queue(settings)} for name in CONTROL_TASKS},
            **{name: {"queue": validation_queue(settings)} for name in VALIDATION_TASKS},
        },
        # Holding the broker URL must not make anyone the fleet's operator (docs/spec/host-features.md#hf-isolation):
        # workers join no control exchange, so Celery's remote control (ping, inspect, shutdown,
        # revoke, cancel_consumer, pool_restart…) reaches no one, and they publish no events.
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        # JSON only: a pickled message is refused unread, never unpickled.
        task_serializer="json",
        accept_content=["json"],
        # Any message our producers never send is dropped before Celery reads it (a malformed
        # one would otherwise crash the worker and be redelivered to the next one).
        worker_consumer=message_guard.HostConsumer,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # One publishing Redis client per channel instead of one per message (services/broker.py).
        broker_transport=broker.transport_for(settings.broker_url),
        broker_transport_options={
            "global_keyprefix": f"{settings.namespace}:",
            # Redelivery of unacknowledged messages is a backstop only: beat sweeps
            # re-dispatch from Postgres long before this (docs/spec/architecture.md#ar-beat "Beat").
            "visibility_timeout": 600,
        },
        timezone="UTC",
        enable_utc=True,
        beat_scheduler="beat.scheduler:HostScheduler",
        beat_max_loop_interval=1,
    )
    return app


app = make_celery()
