"""The Celery task ``takohost.run_context`` (docs/spec/architecture.md#ar-shape: "A replay context is one Celery task
execution") and the worker-process hook that starts the sandbox zygote early.

The task is acknowledged late (``services.celery_app``): a worker killed mid-context leaves the
message to be redelivered, and the sweep re-dispatches from Postgres anyway; the lease and the
epoch make duplicates harmless.

Fair share (docs/spec/host-features.md#hf-isolation): the task reads the instance's Space (one primary-key read) and runs
the context under ``settings.space_max_contexts``; a Space at its cap gets ``"deferred"`` back in
one Redis round trip, without running anything (``workers.sandbox.lease``).
"""

from __future__ import annotations

import logging

import psycopg
from celery import signals

from core import config
from models import db as models_db
from models import instance_sql
from services.celery_app import app
from services.dispatch import RUN_CONTEXT
from workers import sandbox
from workers.engine import context
from workers.sandbox import children

log = logging.getLogger(__name__)

#: Entries of the per-process pk → Space memo (cleared when full; about 10 MB at most).
SPACE_CACHE_SIZE = 100_000
_spaces: dict[tuple[str, int], str] = {}


def space_of(instance_pk: int, settings: config.Settings) -> str | None:
    """The Space of instance ``instance_pk`` (``None``: no such instance — the context then finds it
    not runnable): one indexed read on this process's context connection, remembered per process
    (an instance never changes Space and Postgres never reuses a pk, an identity sequence), so a
    re-dispatched deferred instance costs no read. Database errors propagate (the task fails like a
    context that cannot read its instance; the sweep dispatches it again)."""
    url = settings.database_url
    cached = _spaces.get((url, instance_pk))
    if cached is not None:
        return cached
    try:
        row = models_db.connection_for(url).execute(instance_sql.SELECT_SPACE, {"pk": instance_pk}).fetchone()
    except psycopg.Error:
        models_db.discard_connection(url)
        raise
    if row is None:
        return None
    if len(_spaces) >= SPACE_CACHE_SIZE:
        _spaces.clear()
    _spaces[(url, instance_pk)] = row[0]
    return row[0]


@app.task(name=RUN_CONTEXT, ignore_result=True)
def run_context(instance_pk: int) -> str:
    """Run one replay context of instance ``instance_pk``; returns its outcome word
    (``"deferred"``: its Space runs ``settings.space_max_contexts`` contexts already)."""
    pk = int(instance_pk)
    settings = config.load_settings()
    space = space_of(pk, settings) if settings.space_max_contexts > 0 else None
    return context.run_context(pk, settings=settings, space=space)


@signals.worker_process_init.connect
def _start_zygote(**_: object) -> None:
    """Start this pool process's zygote and a warm child before the first task."""
    try:
        children.prespawn(sandbox.get_zygote())
    except Exception:  # noqa: BLE001 - the first task will try again and report
        log.warning("could not pre-start the sandbox zygote", exc_info=True)
