"""What the host decides for every context: the sandbox policy read from ``TAKOHOST_SANDBOX_*``
(docs/security.md) and the environment every context gets.

Standard library only: the policy travels to the zygote as JSON (:meth:`Policy.to_json`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

__all__ = ["CONTEXT_ENV", "MODES", "NETWORKS", "Policy"]

MODES = ("namespaces", "none")
NETWORKS = ("public", "none")

#: The environment of the zygote and so of every context (the zygote's environment is what a
#: child inherits, in ``os.environ`` and in the C library's ``environ``).
CONTEXT_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class Policy:
    """What the host decides for every context (read from ``TAKOHOST_SANDBOX_*``, see
    docs/security.md).

    Attributes:
        mode: ``"namespaces"`` (default) or ``"none"`` (the documented, unsafe opt-out: children
            run in the host's namespaces as the host's user; for machines that cannot isolate).
        memory_mb: address-space limit of a context in MiB (``RLIMIT_AS``; default 1024).
        max_processes: processes and threads of a context (``RLIMIT_NPROC``; default 64).
        max_open_files: open descriptors of a context (``RLIMIT_NOFILE``; default 256).
        max_file_mb: largest file a context may write, in MiB (``RLIMIT_FSIZE``; default 64).
        scratch_mb: size of the context's private ``/tmp`` in MiB (default 64).
        uid_base: first uid/gid of the per-context identities when the host runs as root
            (default 1600000000; a context gets ``uid_base`` + a slot of ``isolation.uids``).
        sdk_dir: the ``takohost`` package directory on the host (default: this package's); each
            context gets a copy at ``isolation.mounts.SDK_DIR``.
        network: ``"public"`` (default, ``TAKOHOST_SANDBOX_NETWORK``): a network namespace of its
            own whose only way out is the host's egress proxy (``isolation.network``,
            ``workers.egress``: public addresses on the allowed ports, refused otherwise), or
            ``"none"``: a network namespace of its own with no interface up.
        egress_ports: with ``"public"``, the TCP ports the context's namespace listens on for the
            proxy: every port any Space may reach (the host sets it from its egress
            configuration, ``workers.egress.config.EgressConfig.listen_ports``).
        packages_dir: the host's package layers directory (``workers.packages.layers``), mounted
            read-only at ``mounts.PACKAGE_MOUNT`` in every context (the host sets it; ``None``:
            not mounted, a Version with requirements cannot import them).
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
    network: str = "public"
    egress_ports: tuple[int, ...] = (80, 443)
    packages_dir: str | None = None
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
        network = env.get("TAKOHOST_SANDBOX_NETWORK") or "public"
        if network == "outbound":
            raise ValueError(
                "TAKOHOST_SANDBOX_NETWORK=outbound was replaced by public, now the default (public "
                "addresses through the host's egress proxy; see docs/egress.md); unset it"
            )
        if network not in NETWORKS:
            raise ValueError(
                f"TAKOHOST_SANDBOX_NETWORK must be one of {', '.join(NETWORKS)}, not {network!r}"
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
            test_shared_dir=os.path.realpath(shared) if shared else None,
        )

    def to_json(self) -> str:
        """The policy as one JSON argument (for the zygote's command line)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        """Inverse of :meth:`to_json`."""
        values = json.loads(text)
        values["egress_ports"] = tuple(values.get("egress_ports") or ())
        return cls(**values)


def _default_sdk_dir() -> str:
    import takohost

    return os.path.dirname(os.path.realpath(takohost.__file__))
