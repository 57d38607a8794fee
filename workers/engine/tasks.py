"""The Celery task ``takohost.run_context`` (CONTRACT §1: "A replay context is one Celery task
execution") and the worker-process hook that starts the sandbox zygote early.

The task is acknowledged late (``workers.celery_app``): a worker killed mid-context leaves the
message to be redelivered, and the sweep re-dispatches from Postgres anyway; the lease and the
epoch make duplicates harmless.
"""

from __future__ import annotations

import logging

from celery import signals

from workers.celery_app import app
from workers.dispatch import RUN_CONTEXT
from workers.engine import children, context, sandbox

log = logging.getLogger(__name__)


@app.task(name=RUN_CONTEXT, ignore_result=True)
def run_context(instance_pk: int) -> str:
    """Run one replay context of instance ``instance_pk``; returns its outcome word."""
    return context.run_context(int(instance_pk))


@signals.worker_process_init.connect
def _start_zygote(**_: object) -> None:
    """Start this pool process's zygote and a warm child before the first task."""
    try:
        children.prespawn(sandbox.get_zygote())
    except Exception:  # noqa: BLE001 - the first task will try again and report
        log.warning("could not pre-start the sandbox zygote", exc_info=True)
