"""Send Celery messages by task name — the only worker module the API may import.

Callers commit first, then dispatch (STYLE §5): a message never names state that is not
yet durable. A lost message is harmless: beat sweeps re-dispatch from Postgres.
"""

from __future__ import annotations

import logging

from workers.celery_app import app

log = logging.getLogger(__name__)

RECONCILE_OPERATION = "takohost.reconcile_operation"
RUN_CONTEXT = "takohost.run_context"
DELIVER_CRON_MATCH = "takohost.deliver_cron_match"


def _send(name: str, *args: object) -> None:
    try:
        app.send_task(name, args=list(args), queue=app.conf.task_default_queue)
    except Exception:  # broker down: the sweep will re-dispatch from Postgres
        log.warning("dispatch failed; left to the sweep", extra={"task": name, "args": args}, exc_info=True)


def reconcile_operation(operation_id: str) -> None:
    """Ask a worker to reconcile Operation ``operation_id`` (API-op)."""
    _send(RECONCILE_OPERATION, operation_id)


def run_context(instance_pk: int) -> None:
    """Ask a worker to run one replay context of instance ``instance_pk``."""
    _send(RUN_CONTEXT, instance_pk)


def deliver_cron_match(match_pk: int) -> None:
    """Ask a worker to deliver recorded cron match ``match_pk`` (at least once)."""
    _send(DELIVER_CRON_MATCH, match_pk)
