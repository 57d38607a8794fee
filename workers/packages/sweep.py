"""Removing layers no WorkerVersion uses (docs/packages.md "When layers are removed"): a beat duty
(``beat.scheduler.SWEEP_DUTIES``) that runs its work at most every :data:`INTERVAL_S` seconds.

A layer is removed :data:`services.packages.UNUSED_GRACE` (one hour) after the last live Version
using it was deleted: its row first (in one transaction), then its directory on this machine. A
directory on this machine that the database does not record (an install whose Operation never
recorded it) is removed once its index entry is older than the grace period, and so is what a
crashed install left in ``staging/``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time

from models import db as models_db
from services import packages as package_records
from workers.packages import config, layers

__all__ = ["INTERVAL_S", "sweep"]

log = logging.getLogger(__name__)

#: Seconds between two runs of the package sweep's work in one process.
INTERVAL_S = 60.0
_last_run = 0.0


def sweep(*, now: dt.datetime, force: bool = False) -> int:
    """Beat duty: remove unused layers (see the module docstring); returns how many layer
    directories were removed on this machine. Runs its work at most every :data:`INTERVAL_S`
    seconds unless ``force``."""
    global _last_run
    if not force and time.monotonic() - _last_run < INTERVAL_S:
        return 0
    _last_run = time.monotonic()
    cfg = config.current()
    with models_db.session_scope() as session:
        gone = package_records.sweep_txn(session, now=now)
        known = package_records.known_keys_txn(session)
    removed = 0
    if not os.path.isdir(cfg.package_dir):
        return 0
    for key in gone:
        removed += layers.remove(cfg.package_dir, key)
    cutoff = time.time() - package_records.UNUSED_GRACE.total_seconds()  # file times are wall-clock
    for key in layers.local_keys(cfg.package_dir):
        if key in known:
            continue
        index = os.path.join(cfg.package_dir, "index", layers.layer_name(cfg.package_dir, key))
        try:
            recorded_at = os.stat(index).st_mtime
        except FileNotFoundError:
            continue
        if (
            recorded_at < cutoff
            or now.timestamp() - recorded_at > package_records.UNUSED_GRACE.total_seconds()
        ):
            removed += layers.remove(cfg.package_dir, key)
    _clean_staging(cfg.package_dir, cutoff=cutoff)
    if removed:
        log.info("removed %d unused package layers", removed)
    return removed


def _clean_staging(package_dir: str, *, cutoff: float) -> None:
    """Remove what crashed installs left in ``staging/`` (directories, lock files) older than
    ``cutoff`` (a wall-clock time); a live install's files are newer."""
    staging = layers.staging_dir(package_dir)
    try:
        entries = os.listdir(staging)
    except FileNotFoundError:
        return
    for name in entries:
        path = os.path.join(staging, name)
        try:
            if os.lstat(path).st_mtime >= cutoff:
                continue
        except FileNotFoundError:
            continue
        if name.endswith(".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            layers.discard(path)
