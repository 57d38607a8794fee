"""Quotas per Space (docs/spec/host-features.md#hf-neighbours): what one Space may hold, counted exactly and cheaply.

Five quotas, each a limit from the settings (``core.config.Settings.quota_*``; ``0`` = none),
the same for every Space (docs/operations.md "Quotas"):

=====================  ===========================================  ====================================
quota                  counts                                        refused when reached
=====================  ===========================================  ====================================
``liveInstances``      instances not complete/errored/terminated    create: ``429 quota_exceeded``
``storedEvents``       accepted, unconsumed sendEvent events         sendEvent (queued): ``429``
``logBytes``           stored log lines: UTF-8 bytes + 64 per line   new lines dropped, one marker line
``versionCodeBytes``   module sources of live WorkerVersions         Version create: ``429``
``layerBytes``         package layers (:func:`layer_bytes`)          :func:`check_layer_bytes`: ``429``
=====================  ===========================================  ====================================

The counters are one row per Space (``models.usage``), maintained in the transactions that change
what they count (triggers on ``instances``, the log statements, Version create and delete), so a
check is a primary-key read, never a count. A check that refuses writes nothing; what was already
accepted stays. Exact checks lock the Space's row (``models.quota_sql.LOCK_USAGE``) in the
accepting transaction, after the instance row it may lock (one lock order). The log quota is
checked by each batch's statement under the same lock (``models.log_sql``), so concurrent writers
of one Space decide one after another and only the marker lines, which are always kept, pass it;
a line dropped over it is counted in the context's single marker line (:func:`dropped_text`).

A ``quota_exceeded`` error's details are ``{"quota", "current", "limit"}`` (counts, or bytes).
A direct event delivery to a waiting wait stores nothing and is never refused (docs/spec/durable-workflow.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from sqlalchemy import orm

from core import config
from models import db as models_db
from models import quota_sql
from models.errors import DomainError
from services import packages

LIVE_INSTANCES = "liveInstances"
STORED_EVENTS = "storedEvents"
LOG_BYTES = "logBytes"
VERSION_CODE_BYTES = "versionCodeBytes"
LAYER_BYTES = "layerBytes"
#: Every quota, in the order the CLI and the console show them.
QUOTAS = (LIVE_INSTANCES, STORED_EVENTS, LOG_BYTES, VERSION_CODE_BYTES, LAYER_BYTES)

_WHAT = {
    LIVE_INSTANCES: ("live instances", ""),
    STORED_EVENTS: ("stored events", ""),
    LOG_BYTES: ("log bytes", " bytes"),
    VERSION_CODE_BYTES: ("Version code bytes", " bytes"),
    LAYER_BYTES: ("package layer bytes", " bytes"),
}


class QuotaUse(TypedDict):
    """One quota of a Space: ``used`` and ``limit`` (``0``: no limit), counts or bytes."""

    used: int
    limit: int


class Usage(TypedDict):
    """``GET /v2/spaces/{space}/usage``: ``{"space", "quotas": {quota: QuotaUse}}``."""

    space: str
    quotas: dict[str, QuotaUse]


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limit of each quota (``0``: none), from the settings."""

    live_instances: int
    stored_events: int
    log_bytes: int
    version_code_bytes: int
    layer_bytes: int

    def of(self, quota: str) -> int:
        """The limit of ``quota`` (a name of :data:`QUOTAS`)."""
        return {
            LIVE_INSTANCES: self.live_instances,
            STORED_EVENTS: self.stored_events,
            LOG_BYTES: self.log_bytes,
            VERSION_CODE_BYTES: self.version_code_bytes,
            LAYER_BYTES: self.layer_bytes,
        }[quota]


def limits(settings: config.Settings | None = None) -> Limits:
    """The quotas' limits from ``settings`` (read from the environment when not given)."""
    settings = settings or config.load_settings()
    return Limits(
        live_instances=settings.quota_live_instances,
        stored_events=settings.quota_stored_events,
        log_bytes=settings.quota_log_bytes,
        version_code_bytes=settings.quota_version_code_bytes,
        layer_bytes=settings.quota_layer_bytes,
    )


def layer_bytes(space: str) -> int:
    """Bytes of the package layers the live WorkerVersions of ``space`` use
    (:func:`services.packages.space_layer_bytes`: a layer two of its Versions share counts once)."""
    return packages.space_layer_bytes(space)


# -- deciding (pure) ---------------------------------------------------------------------------


def exceeded(quota: str, *, current: int, limit: int) -> DomainError:
    """The ``quota_exceeded`` error of ``quota`` at ``current`` of ``limit`` (HTTP 429)."""
    what, unit = _WHAT[quota]
    return DomainError(
        "quota_exceeded",
        f"the Space's {what} quota is reached ({quota}: {current} of {limit}{unit}); "
        "free some (finish or terminate instances, consume events, delete Versions) or raise "
        f"TAKOHOST_QUOTA_{_setting(quota)}",
        {"quota": quota, "current": current, "limit": limit},
    )


def _setting(quota: str) -> str:
    return {
        LIVE_INSTANCES: "LIVE_INSTANCES",
        STORED_EVENTS: "STORED_EVENTS",
        LOG_BYTES: "LOG_BYTES",
        VERSION_CODE_BYTES: "VERSION_CODE_BYTES",
        LAYER_BYTES: "LAYER_BYTES",
    }[quota]


def check(quota: str, *, current: int, adding: int, limit: int) -> None:
    """Raise :func:`exceeded` unless ``current + adding`` fits in ``limit`` (``0``: no limit)."""
    if limit > 0 and current + adding > limit:
        raise exceeded(quota, current=current, limit=limit)


def dropped_text(count: int) -> str:
    """The marker line of ``count`` log lines a context dropped over its Space's log quota."""
    noun = "line" if count == 1 else "lines"
    return f"{count} {noun} dropped: the Space's log quota"


def code_bytes(spec: dict[str, Any]) -> int:
    """UTF-8 bytes of a WorkerVersion spec's module sources (what ``versionCodeBytes`` counts)."""
    modules = spec.get("modules") or {}
    return sum(len(source.encode("utf-8")) for source in modules.values() if isinstance(source, str))


# -- applying (inside the caller's transaction) ------------------------------------------------


def lock_usage_txn(session: orm.Session, *, space: str) -> dict[str, int]:
    """Lock the Space's counters (creating them) until the transaction ends; returns
    ``{"live_instances", "stored_events", "log_bytes", "version_code_bytes"}``."""
    row = session.connection().exec_driver_sql(quota_sql.LOCK_USAGE, {"space": space}).one()
    return dict(row._mapping)


def check_stored_events_txn(session: orm.Session, *, space: str, settings: config.Settings | None = None) -> None:
    """Before queueing one event of ``space``: raise ``quota_exceeded`` (``storedEvents``) when
    the Space's unconsumed events are at the limit. Locks the counters (after the instance row
    the caller locked)."""
    limit = limits(settings).stored_events
    if limit > 0:
        current = lock_usage_txn(session, space=space)["stored_events"]
        check(STORED_EVENTS, current=current, adding=1, limit=limit)


def charge_version_txn(
    session: orm.Session, *, space: str, spec: dict[str, Any], settings: config.Settings | None = None
) -> None:
    """Count a WorkerVersion being accepted in ``space``; raise ``quota_exceeded``
    (``versionCodeBytes``, nothing charged) when its sources do not fit."""
    size = code_bytes(spec)
    current = lock_usage_txn(session, space=space)["version_code_bytes"]
    check(VERSION_CODE_BYTES, current=current, adding=size, limit=limits(settings).version_code_bytes)
    session.connection().exec_driver_sql(quota_sql.ADD_VERSION_CODE, {"space": space, "bytes": size})


def release_version_txn(session: orm.Session, *, space: str, spec: dict[str, Any]) -> None:
    """Uncount a WorkerVersion whose delete is being applied (in that transaction)."""
    session.connection().exec_driver_sql(quota_sql.ADD_VERSION_CODE, {"space": space, "bytes": -code_bytes(spec)})


def check_layer_bytes(space: str, *, adding: int, settings: config.Settings | None = None) -> None:
    """Before storing a package layer of ``adding`` bytes for ``space``: raise ``quota_exceeded``
    (``layerBytes``) if it does not fit (the packages module calls this)."""
    check(LAYER_BYTES, current=layer_bytes(space), adding=adding, limit=limits(settings).layer_bytes)


# -- reading ------------------------------------------------------------------------------------


def usage(space: str, *, settings: config.Settings | None = None) -> Usage:
    """What ``space`` holds against each quota (see :class:`Usage`); a primary-key read."""
    with models_db.session_scope() as session:
        row = session.connection().exec_driver_sql(quota_sql.SELECT_USAGE, {"space": space}).first()
    counts = dict(row._mapping) if row is not None else {}
    used = {
        LIVE_INSTANCES: counts.get("live_instances", 0),
        STORED_EVENTS: counts.get("stored_events", 0),
        LOG_BYTES: counts.get("log_bytes", 0),
        VERSION_CODE_BYTES: counts.get("version_code_bytes", 0),
        LAYER_BYTES: layer_bytes(space),
    }
    bounds = limits(settings)
    return {
        "space": space,
        "quotas": {quota: {"used": int(used[quota]), "limit": bounds.of(quota)} for quota in QUOTAS},
    }
