"""What the host decides for every context: the sandbox policy read from ``TAKOHOST_SANDBOX_*``
(README "Security model"), the environment every context gets, and the ports of the host's own
services that an ``outbound`` context must never reach.

Standard library only: the policy travels to the zygote as JSON (:meth:`Policy.to_json`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CONTEXT_ENV", "MODES", "NETWORKS", "Policy"]

MODES = ("namespaces", "none")
NETWORKS = ("none", "outbound")

#: The environment of the zygote and so of every context (the zygote's environment is what a
#: child inherits, in ``os.environ`` and in the C library's ``environ``).
CONTEXT_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class Policy:
    """What the host decides for every context (read from ``TAKOHOST_SANDBOX_*``, see README
    "Security model").

    Attributes:
        mode: ``"namespaces"`` (default) or ``"none"`` (the documented, unsafe opt-out: children
            run in the host's namespaces as the host's user; for machines that cannot isolate).
        memory_mb: address-space limit of a context in MiB (``RLIMIT_AS``; default 1024).
        max_processes: processes and threads of a context (``RLIMIT_NPROC``; default 64).
        max_open_files: open descriptors of a context (``RLIMIT_NOFILE``; default 256).
        max_file_mb: largest file a context may write, in MiB (``RLIMIT_FSIZE``; default 64).
        scratch_mb: size of the context's private ``/tmp`` in MiB (default 64).
        uid_base: first uid/gid of the per-context identities when the host runs as root
            (default 1600000000; a context gets ``uid_base`` + its pid on the host).
        sdk_dir: the ``takohost`` package directory mounted read-only (default: this package's).
        network: ``"none"`` (default: a network namespace of its own with no interface up) or
            ``"outbound"`` (``TAKOHOST_SANDBOX_NETWORK``): the host's network, but a Landlock
            domain lets the context open TCP connections only to ``outbound_ports``, bind no TCP
            port and reach no abstract Unix socket outside itself.
        outbound_ports: TCP ports an ``outbound`` context may connect to
            (``TAKOHOST_SANDBOX_OUTBOUND_PORTS``, default ``80,443``); never a port of the host's
            Postgres, Redis or broker (refused when the policy is read).
        test_shared_dir: test-only (``TAKOHOST_TEST_SANDBOX_SHARED_DIR``): one host directory that
            appears read-write at the same path in every context. Never set in production.
    """

    mode: str = "namespaces"
    memory_mb: int = 1024
    max_processes: int = 64
    max_open_files: int = 256
    max_file_mb: int = 64
    scratch_mb: int = 64
    uid_base: int = 1_600_000_000
    sdk_dir: str = field(default_factory=lambda: _default_sdk_dir())
    network: str = "none"
    outbound_ports: tuple[int, ...] = (80, 443)
    test_shared_dir: str | None = None

    @classmethod
    def from_environ(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> Policy:
        """Read the policy from ``environ`` (default ``os.environ``); ``ValueError`` for a bad
        value (named in the message)."""
        env = os.environ if environ is None else environ

        def integer(name: str, default: int, low: int = 1) -> int:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {raw!r}") from None
            if value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
            return value

        mode = env.get("TAKOHOST_SANDBOX_ISOLATION") or "namespaces"
        if mode not in MODES:
            raise ValueError(f"TAKOHOST_SANDBOX_ISOLATION must be one of {', '.join(MODES)}, not {mode!r}")
        network = env.get("TAKOHOST_SANDBOX_NETWORK") or "none"
        if network not in NETWORKS:
            raise ValueError(
                f"TAKOHOST_SANDBOX_NETWORK must be one of {', '.join(NETWORKS)}, not {network!r}"
            )
        ports = _ports(env.get("TAKOHOST_SANDBOX_OUTBOUND_PORTS") or "80,443")
        if network == "outbound":
            for name, port in host_service_ports(env):
                if port in ports:
                    raise ValueError(
                        f"TAKOHOST_SANDBOX_OUTBOUND_PORTS includes {port}, the port of {name}: tenant code "
                        "could reach the host's own service"
                    )
        shared = env.get("TAKOHOST_TEST_SANDBOX_SHARED_DIR") or None
        if shared is not None and not os.path.isabs(shared):
            raise ValueError("TAKOHOST_TEST_SANDBOX_SHARED_DIR must be an absolute path")
        return cls(
            mode=mode,
            memory_mb=integer("TAKOHOST_SANDBOX_MEMORY_MB", 1024, 64),
            max_processes=integer("TAKOHOST_SANDBOX_MAX_PROCESSES", 64, 4),
            max_open_files=integer("TAKOHOST_SANDBOX_MAX_OPEN_FILES", 256, 16),
            max_file_mb=integer("TAKOHOST_SANDBOX_MAX_FILE_MB", 64),
            scratch_mb=integer("TAKOHOST_SANDBOX_SCRATCH_MB", 64),
            uid_base=integer("TAKOHOST_SANDBOX_UID_BASE", 1_600_000_000, 1000),
            network=network,
            outbound_ports=ports,
            test_shared_dir=os.path.realpath(shared) if shared else None,
        )

    def to_json(self) -> str:
        """The policy as one JSON argument (for the zygote's command line)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        """Inverse of :meth:`to_json`."""
        values = json.loads(text)
        values["outbound_ports"] = tuple(values.get("outbound_ports") or ())
        return cls(**values)


def _ports(text: str) -> tuple[int, ...]:
    ports = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= 65535:
            raise ValueError(
                f"TAKOHOST_SANDBOX_OUTBOUND_PORTS must be TCP ports separated by commas, not {text!r}"
            )
        ports.append(int(part))
    return tuple(sorted(set(ports)))


def host_service_ports(env: Any) -> list[tuple[str, int]]:
    """``(variable, port)`` of the host's Postgres, Redis and broker URLs (their defaults too) and
    of its metrics endpoint when ``TAKOHOST_METRICS_PORT`` is set, read from ``env`` (a mapping
    of the host's environment)."""
    from urllib.parse import urlsplit

    defaults = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379, "amqp": 5672}
    found = []
    redis_url = env.get("TAKOHOST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    for name, url in (
        ("TAKOHOST_DATABASE_URL", env.get("TAKOHOST_DATABASE_URL") or "postgresql://127.0.0.1:5432/takohost"),
        ("TAKOHOST_REDIS_URL", redis_url),
        ("TAKOHOST_BROKER_URL", env.get("TAKOHOST_BROKER_URL") or redis_url),
    ):
        try:
            parts = urlsplit(url)
            port = parts.port or defaults.get(parts.scheme.split("+")[0])
        except ValueError:
            continue
        if port:
            found.append((name, port))
    metrics = (env.get("TAKOHOST_METRICS_PORT") or "").strip()
    if metrics.isascii() and metrics.isdigit():
        found.append(("TAKOHOST_METRICS_PORT (the unauthenticated metrics endpoint)", int(metrics)))
    return found


def _default_sdk_dir() -> str:
    import takohost

    return os.path.dirname(os.path.realpath(takohost.__file__))
