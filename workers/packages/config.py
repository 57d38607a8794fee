"""Where layers live and where packages come from (docs/operations.md settings table; docs/packages.md).

Every value is an environment variable, read anew by :func:`current` (tests change them).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT_S", "PackageConfig", "current", "interpreter"]

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class PackageConfig:
    """The installer's settings.

    Attributes:
        package_dir: the host directory holding layers (``TAKOHOST_PACKAGE_DIR``; default
            ``$XDG_CACHE_HOME/takohost/packages``, i.e. ``~/.cache/takohost/packages``;
            ``takohost dev`` one per data dir, ``host_cli.devmode.dev_package_dir``).
        index_url: the package index pip resolves against (``TAKOHOST_PACKAGE_INDEX_URL``;
            ``None``: pip's default, PyPI).
        wheelhouse: a local directory of wheels used *instead of* any index
            (``TAKOHOST_WHEELHOUSE``; pip ``--no-index --find-links``).
        max_bytes: the largest layer, ``.pyc`` files included (``TAKOHOST_PACKAGE_LAYER_MAX_BYTES``,
            default 512 MiB).
        timeout_s: how long one install (resolve, download, unpack, compile) may take
            (``TAKOHOST_PACKAGE_INSTALL_TIMEOUT_S``, default 300 s).
    """

    package_dir: str
    index_url: str | None = None
    wheelhouse: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S


def _default_dir() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "takohost", "packages")


def current() -> PackageConfig:
    """The configuration from the environment. Raises ``ValueError`` naming a bad variable."""
    env = os.environ

    def number(name: str, default: float) -> float:
        raw = (env.get(name) or "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{name} must be a number, not {raw!r}") from None
        if value <= 0:
            raise ValueError(f"{name} must be positive, not {raw!r}")
        return value

    wheelhouse = (env.get("TAKOHOST_WHEELHOUSE") or "").strip() or None
    return PackageConfig(
        package_dir=os.path.abspath(env.get("TAKOHOST_PACKAGE_DIR") or _default_dir()),
        index_url=(env.get("TAKOHOST_PACKAGE_INDEX_URL") or "").strip() or None,
        wheelhouse=os.path.abspath(wheelhouse) if wheelhouse else None,
        max_bytes=int(number("TAKOHOST_PACKAGE_LAYER_MAX_BYTES", DEFAULT_MAX_BYTES)),
        timeout_s=number("TAKOHOST_PACKAGE_INSTALL_TIMEOUT_S", DEFAULT_TIMEOUT_S),
    )


def interpreter() -> str:
    """The interpreter layers are built for and keyed by: ``"cpython-311-x86_64"`` (the sandbox
    runs this host's interpreter, so its wheels are the ones pip picks here)."""
    return f"{sys.implementation.cache_tag}-{platform.machine().lower()}"
