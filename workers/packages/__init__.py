"""Third-party packages of WorkerVersions: pins installed by pip as wheels into content-addressed,
read-only layers that the sandbox mounts (docs/spec/worker-forms.md#wf-version; docs/spec/host-features.md#hf-real-work; docs/packages.md).

One concern a module: ``config`` (the settings), ``layers`` (the directory on this machine),
``installer`` (pip, compile, publish), ``resolve`` (why an install failed: the error code and the
package), ``sweep`` (removing layers no Version uses).
"""

from __future__ import annotations

from takohost.domain import requirements as pins
from workers.packages import config, installer, resolve

__all__ = ["PackageError", "layer_for_spec"]

PackageError = resolve.PackageError


def layer_for_spec(spec: dict, *, cfg: config.PackageConfig | None = None) -> installer.Layer | None:
    """The installed layer of a (schema-valid) WorkerVersion ``spec``'s ``requirements`` on this
    machine, installed now when it is missing here; ``None`` when the spec pins nothing.

    Raises:
        PackageError: the pins cannot be installed (its ``code`` and ``package``).
        OSError: the package directory cannot be written.
    """
    requirements = pins.parse_requirements(spec.get("requirements") or [])
    if not requirements:
        return None
    return installer.install(requirements, cfg=cfg)
