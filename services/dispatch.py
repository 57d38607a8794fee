"""Send Celery messages by task name — the only worker module the API may import.

Callers commit first, then dispatch (docs/spec/house-rules.md#hr-txn): a message never names state that is not
yet durable. A lost message is harmless: beat sweeps re-dispatch from Postgres. So no function
here raises: a failed send is logged as a warning and left to the sweep.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from services import celery_app, fleet
from services.celery_app import app

log = logging.getLogger(__name__)

RECONCILE_OPERATION = "takohost.reconcile_operation"
VALIDATE_VERSION = "takohost.validate_version"
RUN_CONTEXT = "takohost.run_context"
DELIVER_CRON_MATCH = "takohost.deliver_cron_match"

#: Messages of a bulk send written to the broker per round trip (one kombu publish batch).
BULK_CHUNK = 500


def _send(name: str, *args: object) -> None:
    try:
        app.send_task(name, args=list(args), queue=celery_app.queue_for(name, celery=app))
    except Exception:  # broker down: the sweep will re-dispatch from Postgres
        # `args` is a LogRecord attribute: naming an extra key so would raise from the log call.
        log.warning(
            "dispatch failed; left to the sweep", extra={"task": name, "task_args": args}, exc_info=True
        )


def _send_many(name: str, arg_lists: Sequence[Sequence[object]]) -> int:
    """Send one ``name`` message per item of ``arg_lists`` (in order) through ONE producer.

    Sending message by message acquires a producer and writes to Redis once per message; here
    one producer is acquired and each chunk of ``BULK_CHUNK`` messages is written in one Redis
    pipeline (kombu ``Producer.batch``; older kombu without it sends them one by one on the same
    producer). Returns how many messages the broker surely accepted: the first failure stops the
    send (the broker is then most likely down, and every further message would wait out its own
    publish retries), logs one warning and leaves the rest — including a chunk whose pipeline
    failed part-way — to the sweep. Never raises.
    """
    queue = celery_app.queue_for(name, celery=app)
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            batch = getattr(producer, "batch", None)  # kombu >= 5.7
            for start in range(0, len(arg_lists), BULK_CHUNK):
                chunk = arg_lists[start : start + BULK_CHUNK]
                with batch(max_size=BULK_CHUNK) if batch is not None else contextlib.nullcontext():
                    for args in chunk:
                        app.send_task(name, args=list(args), queue=queue, producer=producer)
                sent += len(chunk)  # the batch is flushed on leaving the block
    except Exception:  # broker down: the sweep will re-dispatch from Postgres
        log.warning(
            "bulk dispatch failed; %d of %d messages left to the sweep",
            len(arg_lists) - sent,
            len(arg_lists),
            extra={"task": name, "sent": sent, "unsent": len(arg_lists) - sent},
            exc_info=True,
        )
    return sent


def reconcile_operation(operation_id: str) -> None:
    """Ask a worker to reconcile Operation ``operation_id`` (API-op)."""
    _send(RECONCILE_OPERATION, operation_id)


def validate_version(operation_id: str) -> None:
    """Ask a worker's validation process to reconcile WorkerVersion Operation ``operation_id``
    (its import check runs tenant code: ``services.celery_app.VALIDATION_TASKS``)."""
    _send(VALIDATE_VERSION, operation_id)


def run_context(instance_pk: int, *, space: str | None = None) -> None:
    """Ask a worker to run one replay context of instance ``instance_pk``. With its ``space``
    (a create, an event): nothing is sent while that Space runs its cap of contexts already —
    the instance is recorded as waiting for the next slot that Space releases
    (``services.fleet.defer_dispatch``), so one Space's flood never fills the FIFO queue in front
    of another Space's work."""
    if space is not None and fleet.defer_dispatch(instance_pk, space=space):
        return
    _send(RUN_CONTEXT, instance_pk)


def run_contexts(instance_pks: Sequence[int]) -> int:
    """Ask workers to run one replay context of each instance of ``instance_pks``: one
    ``takohost.run_context`` message per pk, in order, all through one producer in pipelined
    writes (as :func:`deliver_cron_matches`).

    For beat's timers and sweep, which make up to thousands of instances runnable in one
    transaction (10,000 sleeps due in one second). Returns how many messages the broker surely
    accepted; the others are left to ``workers.engine.sweep`` with a warning. Call after the
    commit. Never raises.
    """
    if not instance_pks:
        return 0
    return _send_many(RUN_CONTEXT, [(pk,) for pk in instance_pks])


def deliver_cron_match(match_pk: int) -> None:
    """Ask a worker to deliver recorded cron match ``match_pk`` (at least once)."""
    _send(DELIVER_CRON_MATCH, match_pk)


def deliver_cron_matches(match_pks: Sequence[int]) -> int:
    """Ask workers to deliver each recorded cron match of ``match_pks``: one
    ``takohost.deliver_cron_match`` message per pk, in order, all through one producer.

    For beat, which dispatches a minute's matches (thousands) at once (docs/spec/cron-trigger.md#cr-delivery at-least-once;
    docs/spec/cron-trigger.md#cr-runs). Returns how many messages the broker surely accepted (``len(match_pks)`` unless
    the broker failed); the others are left to ``workers.cron_tasks.sweep`` with a warning, as
    for ``deliver_cron_match``. Call after the matches are committed. Never raises.
    """
    if not match_pks:
        return 0
    return _send_many(DELIVER_CRON_MATCH, [(pk,) for pk in match_pks])
