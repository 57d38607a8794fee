"""The Celery application shared by workers, beat and the API's dispatch (CONTRACT §1).

Redis is the broker (and lease store); Postgres holds the truth, so a lost message is
recovered by a beat sweep, never by the broker. Tasks are acknowledged late and are all
idempotent against Postgres state.
"""

from __future__ import annotations

from celery import Celery

from takohost import config

#: Modules that define tasks; imported by worker processes only.
TASK_MODULES = ["workers.tasks"]


def make_celery(settings: config.Settings | None = None) -> Celery:
    """Build the Celery app for ``settings`` (default: from the environment).

    Every Redis key of the broker is prefixed with ``{namespace}:`` and the only queue is
    ``settings.queue``, so several hosts or test sessions can share one Redis.
    """
    settings = settings or config.load_settings()
    app = Celery("takohost", broker=settings.broker_url, include=TASK_MODULES)
    app.conf.update(
        task_default_queue=settings.queue,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "global_keyprefix": f"{settings.namespace}:",
            # Redelivery of unacknowledged messages is a backstop only: beat sweeps
            # re-dispatch from Postgres long before this (DESIGN "Beat").
            "visibility_timeout": 600,
        },
        timezone="UTC",
        enable_utc=True,
        beat_scheduler="beat.scheduler:HostScheduler",
        beat_max_loop_interval=1,
    )
    return app


app = make_celery()
