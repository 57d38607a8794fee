"""Amounts as people read them (pure): byte sizes for the CLI, the console and host log lines."""

from __future__ import annotations


def size_text(value: int) -> str:
    """``value`` bytes as ``512 B``, ``1.5 KiB``, ``12.0 MiB`` … ``3.0 GiB`` (one decimal past bytes;
    GiB is the largest unit)."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
