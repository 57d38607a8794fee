"""The ``takohost spaces usage`` command (docs/spec/host-features.md#hf-neighbours): what the Space holds against each of
its quotas, as a table or (``--json``) the API's ``GET /v2/spaces/{space}/usage`` document.

Options, output and errors follow ``host_cli.common``; ``host_cli.client_commands`` registers the
group on the ``takohost`` group.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from core import units
from host_cli import client as http
from host_cli import common

__all__ = ["spaces"]

#: Quota name → (label, whether it counts bytes), in the API's order.
_QUOTAS = {
    "liveInstances": ("live instances", False),
    "storedEvents": ("stored events", False),
    "logBytes": ("log bytes (retained)", True),
    "versionCodeBytes": ("Version code bytes", True),
    "layerBytes": ("package layer bytes", True),
}


def amount(value: int, *, in_bytes: bool) -> str:
    """``value`` for a table cell: a count as is (``12,345``), bytes as ``core.units.size_text``."""
    return units.size_text(value) if in_bytes else f"{value:,}"


def rows(document: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The table's ``(QUOTA, USED, LIMIT, USE)`` rows of a usage document (``limit`` 0: none)."""
    out = []
    for name, value in (document.get("quotas") or {}).items():
        label, in_bytes = _QUOTAS.get(name, (name, False))
        used, limit = int(value.get("used", 0)), int(value.get("limit", 0))
        share = f"{100 * used / limit:.0f}%" if limit else "-"
        out.append((label, amount(used, in_bytes=in_bytes), amount(limit, in_bytes=in_bytes) if limit else "none", share))
    return out


@click.group("spaces")
def spaces() -> None:
    """The Space of the token: its quotas."""


@spaces.command("usage")
@common.json_client_command
def usage(api: http.Client, *, as_json: bool) -> None:
    """Show what the Space holds against each quota (live instances, stored events, log bytes,
    Version code bytes, package layer bytes); at a limit new work is refused (429 quota_exceeded)."""
    document = api.get_usage()
    if as_json:
        common.emit_json(document)
        return
    table = Table("QUOTA", "USED", "LIMIT", "USE", title=f"Space {document.get('space', api.space)}")
    for row in rows(document):
        table.add_row(*row)
    Console().print(table)
