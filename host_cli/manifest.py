"""``DIR/takohost.toml`` for the CLI: ``takohost.manifest`` (the file's schema, shared with the test
kit) with the host's cron check (``core.cron``) for ``[[triggers]]``. See ``takohost/manifest.py``
for the format.
"""

from __future__ import annotations

import pathlib

from core import cron
from takohost import manifest as base
from takohost.manifest import (  # noqa: F401 (re-exported: __all__ below)
    MANIFEST_FILE,
    MAX_MODULE_BYTES,
    Manifest,
    ManifestError,
    Project,
    TriggerDecl,
    WorkflowDecl,
    collect_modules,
    content_digest,
)

__all__ = list(base.__all__)  # the same names; load, load_project and parse add the cron check


def check_cron(expression: str) -> str | None:
    """``None`` when ``expression`` is a valid five-field UTC cron (docs/spec/cron-trigger.md), else the reason."""
    try:
        cron.parse(expression)
    except cron.CronSyntaxError as exc:
        return exc.message
    return None


def load(directory: str | pathlib.Path) -> Manifest:
    """``takohost.manifest.load`` with the cron check. Raises ``ManifestError``."""
    return base.load(directory, check_cron=check_cron)


def load_project(directory: str | pathlib.Path) -> Project:
    """``takohost.manifest.load_project`` with the cron check. Raises ``ManifestError``."""
    return base.load_project(directory, check_cron=check_cron)


def parse(text: str, *, source: str = MANIFEST_FILE) -> Manifest:
    """``takohost.manifest.parse`` with the cron check. Raises ``ManifestError``."""
    return base.parse(text, source=source, check_cron=check_cron)
