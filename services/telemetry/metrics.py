"""Prometheus metrics of the host (docs/spec/host-features.md#hf-observability), with ``prometheus_client``'s multiprocess mode.

Off unless the operator asks: ``takohost api|worker|beat --metrics-port PORT`` (or
``TAKOHOST_METRICS_PORT``) makes that command :func:`prepare` a fresh multiprocess directory of its
own (``TAKOHOST_METRICS_DIR``, default ``$TMPDIR/takohost-metrics-<uid>``, then ``<role>-<pid>``
inside; directories of commands that are gone are removed at start, its own at exit) and exports it
as ``PROMETHEUS_MULTIPROC_DIR`` to every process it starts (gunicorn workers, Celery pool or solo
processes); then :func:`serve` answers ``GET /metrics`` on ``TAKOHOST_METRICS_ADDR`` (default
``127.0.0.1``) and that port, unauthenticated, with the sum over the command's processes. The
tenant-facing API port never serves metrics (they name every Space's workflows). A process whose
``PROMETHEUS_MULTIPROC_DIR`` is unset records nothing: every hook below is then one dict lookup.

Only the beat's endpoint adds the host-wide gauges read at scrape time (:class:`HostStateCollector`:
instances by status, broker queue depth), so that a fleet reports them once. Names carry the
``takohost_`` prefix and base units (seconds).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from core import processes

ENV_DIR = "PROMETHEUS_MULTIPROC_DIR"

#: Seconds buckets for things that take milliseconds to seconds (commits, spawns, HTTP).
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Seconds buckets for contexts, Operations and lateness (milliseconds to minutes).
SLOW_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

#: name → (type, help, labels, buckets); created on first use in a process with metrics on.
DEFINITIONS: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...] | None]] = {
    "takohost_instances_started_total": (
        "counter", "Instances created, by Space and DurableWorkflow UID.", ("space", "workflow"), None),
    "takohost_instances_finished_total": (
        "counter", "Instances that reached a terminal status, by Space, DurableWorkflow UID, status "
        "(complete, errored, terminated) and errored reason.", ("space", "workflow", "status", "reason"), None),
    "takohost_context_duration_seconds": (
        "histogram", "Wall time of one replay context, by outcome (complete, sleeping, waiting, retry, "
        "errored, fenced, busy, deferred, …).", ("outcome",), SLOW_BUCKETS),
    "takohost_sandbox_spawn_seconds": (
        "histogram", "Time to get a sandbox child with its job (warm child or zygote fork).", ("kind",),
        FAST_BUCKETS),
    "takohost_step_commit_seconds": (
        "histogram", "Latency of one fenced commit of a replay context, by kind (start, attempt, sleep, "
        "suspend, wait, terminal).", ("kind",), FAST_BUCKETS),
    "takohost_timer_lateness_seconds": (
        "histogram", "From a timer's due time (sleep wake, retry, wait timeout) to the start of the context "
        "it woke.", ("kind",), SLOW_BUCKETS),
    "takohost_cron_record_lateness_seconds": (
        "histogram", "From a cron match's scheduled time to its recording by beat.", (), SLOW_BUCKETS),
    "takohost_cron_delivery_start_lateness_seconds": (
        "histogram", "From a cron match's scheduled time to the start of a delivery of it.", (), SLOW_BUCKETS),
    "takohost_fencing_rejections_total": (
        "counter", "Commits refused because the context's fencing token (epoch) was stale.", (), None),
    "takohost_lease_losses_total": (
        "counter", "Contexts and cron deliveries that lost their Redis lease while running.", ("kind",), None),
    "takohost_egress_connections_total": (
        "counter", "Outbound connections of tenant code through the egress proxy, and refused name "
        "look-ups, by Space and outcome (ok, failed, refused, lookup_refused).", ("space", "outcome"), None),
    "takohost_egress_bytes_total": (
        "counter", "Bytes relayed for tenant code by the egress proxy, by Space and direction (sent, "
        "received).", ("space", "direction"), None),
    "takohost_operation_duration_seconds": (
        "histogram", "From the acceptance of an Operation to its finish, by kind, Form and final state.",
        ("kind", "form", "state"), SLOW_BUCKETS),
    "takohost_http_request_duration_seconds": (
        "histogram", "HTTP API request latency, by method, route template and status code.",
        ("method", "route", "status"), FAST_BUCKETS),
}

#: Gauges the beat's endpoint computes at scrape time (:class:`HostStateCollector`).
SCRAPE_GAUGES = {
    "takohost_instances": "Instances by status (all Spaces).",
    "takohost_broker_queue_depth": "Messages waiting in the broker queue.",
}

_metrics: dict[str, Any] | None = None
_dir_seen: str | None = None


def enabled() -> bool:
    """Whether this process records metrics (``PROMETHEUS_MULTIPROC_DIR`` names a directory)."""
    directory = os.environ.get(ENV_DIR)
    return directory is not None and bool(directory) and os.path.isdir(directory)


def _get(name: str) -> Any | None:
    global _metrics, _dir_seen
    directory = os.environ.get(ENV_DIR)
    if _metrics is None or directory != _dir_seen:
        _dir_seen = directory
        _metrics = _create() if directory and os.path.isdir(directory) else {}
    return _metrics.get(name)


def _create() -> dict[str, Any]:
    import prometheus_client
    from prometheus_client import values

    # prometheus_client picks its value class at import; a process that imported it before the
    # directory was exported (tests) switches to the multiprocess values now.
    values.ValueClass = values.get_value_class()
    registry = prometheus_client.CollectorRegistry(auto_describe=False)  # not the global one
    made: dict[str, Any] = {}
    for name, (kind, text, labels, buckets) in DEFINITIONS.items():
        if kind == "counter":
            made[name] = prometheus_client.Counter(name.removesuffix("_total"), text, labels, registry=registry)
        else:
            assert buckets is not None  # every histogram of DEFINITIONS names its buckets
            made[name] = prometheus_client.Histogram(name, text, labels, buckets=buckets, registry=registry)
    return made


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add ``amount`` to counter ``name`` (one of :data:`DEFINITIONS`) with ``labels``; no-op when off."""
    metric = _get(name)
    if metric is not None:
        (metric.labels(**labels) if labels else metric).inc(amount)


def observe(name: str, value: float, **labels: str) -> None:
    """Record ``value`` (seconds) in histogram ``name`` with ``labels``; no-op when off."""
    metric = _get(name)
    if metric is not None:
        (metric.labels(**labels) if labels else metric).observe(max(0.0, value))


@contextlib.contextmanager
def timed(name: str, **labels: str) -> Iterator[None]:
    """Observe the block's wall time in histogram ``name`` (also when it raises); no-op when off."""
    if _get(name) is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        observe(name, time.perf_counter() - started, **labels)


# -- the processes' side --------------------------------------------------------------------------


def base_dir() -> str:
    """Where the commands' multiprocess directories live (``TAKOHOST_METRICS_DIR``)."""
    return os.environ.get("TAKOHOST_METRICS_DIR") or os.path.join(
        tempfile.gettempdir(), f"takohost-metrics-{os.getuid()}"
    )


def prepare(role: str) -> str:
    """For the command ``role`` (``api``, ``worker``, ``beat``): remove the directories of commands
    that are gone, make ``<base>/<role>-<pid>`` fresh (mode 0700), export it as
    ``PROMETHEUS_MULTIPROC_DIR`` and remove it at exit. Returns the directory."""
    base = base_dir()
    os.makedirs(base, mode=0o700, exist_ok=True)
    for entry in os.listdir(base):
        _, _, pid = entry.rpartition("-")
        if pid.isdigit() and not processes.running(int(pid)):
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
    directory = os.path.join(base, f"{role}-{os.getpid()}")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory, mode=0o700)
    os.environ[ENV_DIR] = directory
    owner = os.getpid()

    def _cleanup() -> None:
        if os.getpid() == owner:  # not in a forked child that exits
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(_cleanup)
    return directory


def process_exit(pid: int | None = None) -> None:
    """Tell the multiprocess files that process ``pid`` (default: this one) is gone (its live
    gauges stop counting); call from a pool process's shutdown or a supervisor's reaper."""
    directory = os.environ.get(ENV_DIR)
    if directory and os.path.isdir(directory):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), directory)


def registry(*, host_state: bool = False, settings: Any = None) -> Any:
    """A registry that sums this command's processes (and, with ``host_state``, adds
    :class:`HostStateCollector` for ``settings``)."""
    from prometheus_client import CollectorRegistry, multiprocess

    reg = CollectorRegistry()
    multiprocess.MultiProcessCollector(reg, path=os.environ[ENV_DIR])
    if host_state:
        reg.register(HostStateCollector(settings))
    return reg


def serve(port: int, *, addr: str | None = None, host_state: bool = False, settings: Any = None) -> None:
    """Answer ``GET /metrics`` on ``addr`` (``TAKOHOST_METRICS_ADDR``, default 127.0.0.1) and
    ``port`` from a daemon thread of this process (call after :func:`prepare`)."""
    from prometheus_client import start_http_server

    start_http_server(
        port,
        addr=addr or os.environ.get("TAKOHOST_METRICS_ADDR") or "127.0.0.1",
        registry=registry(host_state=host_state, settings=settings),
    )


def port_from_env(value: int | None) -> int | None:
    """``value`` (a ``--metrics-port``), else ``TAKOHOST_METRICS_PORT`` as an int, else ``None``.

    Raises ``ValueError`` (with a message for the user) when the variable is not a port 1–65535.
    """
    if value is not None:
        return value
    raw = os.environ.get("TAKOHOST_METRICS_PORT", "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 65535):
        raise ValueError(f"TAKOHOST_METRICS_PORT must be a port 1-65535, not {raw!r}")
    return int(raw)


#: kombu's Redis transport keeps a priority's messages in ``queue + SEP + priority``.
_PRIORITY_SEP = "\x06\x16"


class HostStateCollector:
    """Gauges read when scraped: ``takohost_instances{status}`` (one ``GROUP BY`` over the
    instances) and ``takohost_broker_queue_depth{queue}`` (``LLEN`` of the Celery queue's lists in
    the broker). A read that fails leaves its gauge out of that scrape."""

    def __init__(self, settings: Any) -> None:
        from core import config

        self.settings = settings or config.load_settings()

    def describe(self) -> list:
        """Nothing up front (the registry must not collect at registration)."""
        return []

    def collect(self) -> Iterator[Any]:
        """Yield the two gauge families (see the class doc)."""
        from prometheus_client.core import GaugeMetricFamily

        instances = GaugeMetricFamily("takohost_instances", SCRAPE_GAUGES["takohost_instances"], labels=["status"])
        try:
            for status, count in self._count_by_status().items():
                instances.add_metric([status], count)
            yield instances
        except Exception:  # noqa: BLE001 - a scrape must not fail on one source
            pass
        depth = GaugeMetricFamily(
            "takohost_broker_queue_depth", SCRAPE_GAUGES["takohost_broker_queue_depth"], labels=["queue"]
        )
        try:
            depth.add_metric([self.settings.queue], self._queue_depth())
            yield depth
        except Exception:  # noqa: BLE001
            pass

    def _count_by_status(self) -> dict[str, int]:
        from models import db as models_db
        from models import status_counts

        with models_db.session_scope(self.settings.database_url) as session:
            return status_counts.totals_txn(session)

    def _queue_depth(self) -> int:
        from services import redis_client

        key = f"{self.settings.namespace}:{self.settings.queue}"
        pipe = redis_client.client(self.settings.broker_url).pipeline(transaction=False)
        for suffix in ("", *(f"{_PRIORITY_SEP}{p}" for p in (3, 6, 9))):
            pipe.llen(key + suffix)
        return sum(pipe.execute())
