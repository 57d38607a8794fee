"""Host configuration read from the environment (docs/spec/architecture.md#ar-operating).

Every setting is an environment variable; production values are fixed here. Settings whose
name contains ``TEST`` exist only so that tests can compress time (documented in docs/operations.md,
"Test-only settings"); they must never be set in production.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/takohost"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class Settings:
    """Resolved host settings.

    Attributes:
        database_url: SQLAlchemy URL of the source of truth (``TAKOHOST_DATABASE_URL``).
        redis_url: Redis URL for leases (``TAKOHOST_REDIS_URL``).
        broker_url: Celery broker URL (``TAKOHOST_BROKER_URL``, default: ``redis_url``).
        namespace: prefix of every Redis key and Celery queue of this host
            (``TAKOHOST_NAMESPACE``, default ``takohost``); lets several hosts (or test
            sessions) share one Redis.
        lease_ttl_ms: replay-context lease time-to-live in milliseconds (``15000``).
        sweep_interval_s: seconds between beat sweeps (``5``).
        validation_timeout_s: seconds a WorkerVersion import may take (``10``).
        validation_concurrency: import checks the validation process of each ``takohost worker``
            runs at once (``TAKOHOST_VALIDATION_CONCURRENCY``, ``4``, at least 2); one Space runs
            at most this minus one of them in a process (``workers.operations_tasks``).
        scheduled_timeout_s: seconds one call of a ``scheduled`` handler (with its
            ``wait_until`` work) may take before it is killed and recorded as a failed run
            (``TAKOHOST_SCHEDULED_TIMEOUT_S``, ``900``; docs/spec/host-limits.md#hl-decisions "Host limits").
        step_timeout_s: seconds one attempt of ``step.do`` may run, and code outside steps between
            two step calls (``TAKOHOST_STEP_TIMEOUT_SECONDS``, ``600``; docs/spec/host-limits.md#hl-decisions "Attempt time
            limit"): past it the context's child is killed and proven dead; an attempt is then a
            failed attempt (``StepTimeout``, retried per its policy), code outside steps ends the
            instance ``errored``/``run_threw`` (it is deterministic: a retry would run as long).
        space_max_contexts: how many replay contexts one Space may run at once across the whole
            fleet (``TAKOHOST_SPACE_MAX_CONTEXTS``, default ``8``; ``0`` = no cap). Over it a
            context is deferred: its instance stays ``queued`` and starts when a context of the
            same Space ends (``workers.sandbox.lease``; docs/operations.md "Production").
        console_idle_s: seconds a web-console session lasts without a request
            (``TAKOHOST_CONSOLE_IDLE_SECONDS``, ``3600``; ``services.console_sessions``).
        console_session_s: seconds a web-console session lasts at most after sign-in
            (``TAKOHOST_CONSOLE_SESSION_SECONDS``, ``43200``).
        trusted_proxies: how many reverse proxies in front of the API set ``X-Forwarded-For``,
            ``-Proto``, ``-Host`` and ``-Port`` (``TAKOHOST_TRUSTED_PROXIES``, ``0``: the headers
            are ignored); werkzeug's ``ProxyFix`` trusts that many values of each.
        space_reserved_slots: slots of the live fleet one Space never takes
            (``TAKOHOST_SPACE_RESERVED_SLOTS``, default ``1``; ``0``: the fixed cap alone): the
            cap is ``max(1, min(space_max_contexts, live slots - this))``, the live slots being
            what the workers register in Redis (``services.fleet``).
        quota_live_instances, quota_stored_events, quota_log_bytes, quota_version_code_bytes,
            quota_layer_bytes: what one Space may hold (``TAKOHOST_QUOTA_*``; ``0`` = no limit;
            ``services.quotas``, docs/operations.md "Quotas"): instances not yet terminal (``10000``),
            accepted unconsumed events (``100000``), bytes of stored log lines (``536870912``,
            512 MiB), bytes of live WorkerVersions' module sources (``268435456``, 256 MiB) and
            bytes of package layers (``2147483648``, 2 GiB).
    """

    database_url: str
    redis_url: str
    broker_url: str
    namespace: str
    lease_ttl_ms: int
    sweep_interval_s: float
    validation_timeout_s: float
    scheduled_timeout_s: float = 900.0
    validation_concurrency: int = 4
    step_timeout_s: float = 600.0
    space_max_contexts: int = 8
    console_idle_s: float = 3600.0
    console_session_s: float = 43200.0
    trusted_proxies: int = 0
    space_reserved_slots: int = 1
    quota_live_instances: int = 10_000
    quota_stored_events: int = 100_000
    quota_log_bytes: int = 512 << 20
    quota_version_code_bytes: int = 256 << 20
    quota_layer_bytes: int = 2 << 30
    #: Test-only fault injection (``TAKOHOST_TEST_BEAT_EXIT_AFTER_RECORD``, a trigger UID): beat
    #: exits right after committing a match of that trigger and before dispatching it.
    test_beat_exit_after_record: str | None = None
    #: Test-only (``TAKOHOST_TEST_LIFETIME_SECONDS``): instance lifetime in seconds for instances
    #: created by this process; production is docs/spec/durable-workflow.md's 31536000 (``None`` = production).
    test_lifetime_seconds: float | None = None
    #: Test-only (``TAKOHOST_TEST_RETENTION_SECONDS``): seconds a terminal instance is kept before
    #: the retention sweep purges it; production is docs/spec/durable-workflow.md#dw-retention's 2592000 (``None`` = production).
    test_retention_seconds: float | None = None

    @property
    def queue(self) -> str:
        """The Celery queue name of this host (``{namespace}.tasks``)."""
        return f"{self.namespace}.tasks"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw in (None, "") else float(raw)


def _optional_float(name: str) -> float | None:
    raw = os.environ.get(name)
    return None if raw in (None, "") else float(raw)


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    value = int(raw)
    if value < 0:
        raise ValueError(f"{name} must be 0 (no limit) or a positive integer, not {raw!r}")
    return value


def load_settings() -> Settings:
    """Read :class:`Settings` from the environment (no caching: tests change it)."""
    redis_url = os.environ.get("TAKOHOST_REDIS_URL") or DEFAULT_REDIS_URL
    return Settings(
        database_url=os.environ.get("TAKOHOST_DATABASE_URL") or DEFAULT_DATABASE_URL,
        redis_url=redis_url,
        broker_url=os.environ.get("TAKOHOST_BROKER_URL") or redis_url,
        namespace=os.environ.get("TAKOHOST_NAMESPACE") or "takohost",
        lease_ttl_ms=int(_float("TAKOHOST_LEASE_TTL_MS", 15000)),
        sweep_interval_s=_float("TAKOHOST_SWEEP_INTERVAL_S", 5.0),
        validation_timeout_s=_float("TAKOHOST_VALIDATION_TIMEOUT_S", 10.0),
        space_max_contexts=max(0, int(_float("TAKOHOST_SPACE_MAX_CONTEXTS", 8))),
        space_reserved_slots=max(0, int(_float("TAKOHOST_SPACE_RESERVED_SLOTS", 1))),
        scheduled_timeout_s=_float("TAKOHOST_SCHEDULED_TIMEOUT_S", 900.0),
        console_idle_s=_float("TAKOHOST_CONSOLE_IDLE_SECONDS", 3600.0),
        console_session_s=_float("TAKOHOST_CONSOLE_SESSION_SECONDS", 43200.0),
        trusted_proxies=max(0, int(_float("TAKOHOST_TRUSTED_PROXIES", 0))),
        step_timeout_s=_float("TAKOHOST_STEP_TIMEOUT_SECONDS", 600.0),
        validation_concurrency=max(2, int(_float("TAKOHOST_VALIDATION_CONCURRENCY", 4))),
        quota_live_instances=_count("TAKOHOST_QUOTA_LIVE_INSTANCES", 10_000),
        quota_stored_events=_count("TAKOHOST_QUOTA_STORED_EVENTS", 100_000),
        quota_log_bytes=_count("TAKOHOST_QUOTA_LOG_BYTES", 512 << 20),
        quota_version_code_bytes=_count("TAKOHOST_QUOTA_VERSION_CODE_BYTES", 256 << 20),
        quota_layer_bytes=_count("TAKOHOST_QUOTA_LAYER_BYTES", 2 << 30),
        test_beat_exit_after_record=os.environ.get("TAKOHOST_TEST_BEAT_EXIT_AFTER_RECORD") or None,
        test_lifetime_seconds=_optional_float("TAKOHOST_TEST_LIFETIME_SECONDS"),
        test_retention_seconds=_optional_float("TAKOHOST_TEST_RETENTION_SECONDS"),
    )
