"""The tenant's own frames of an exception's traceback (docs/spec/host-features.md#hf-observability), child and host side.

In the sandbox child, :func:`tenant_frames` turns an exception into the frames of the Version's
own modules (their ``__file__`` is ``/takohost/version/<path>``, ``child.importer.VIRTUAL_ROOT``): host,
SDK and standard-library frames are trimmed. Each frame is ``{"module", "file", "line",
"function", "source"}`` (``file`` relative to the Version, e.g. ``"pkg/util.py"``; ``source`` the
stripped source line, ``""`` when unknown), innermost last, at most :data:`MAX_FRAMES` (the
innermost are kept). A ``SyntaxError`` in a Version module adds its own location as the last frame.

On the host, :func:`clean_frames` re-checks such a list from an untrusted child (shape, types,
lengths) and :func:`format_frames` renders it as text (CLI, logs).

Standard library only (runs in the child).
"""

from __future__ import annotations

import traceback
from typing import Any

__all__ = ["MAX_FRAMES", "VIRTUAL_ROOT", "clean_frames", "format_frames", "location", "tenant_frames"]

VIRTUAL_ROOT = "/takohost/version/"
#: Frames kept per traceback (the innermost).
MAX_FRAMES = 32
_MAX_SOURCE = 300
_MAX_NAME = 256
_KEYS = frozenset({"module", "file", "line", "function", "source"})


def _cut(text: object, limit: int) -> str:
    value = text if type(text) is str else ""
    value = value.encode("utf-8", "replace").decode("utf-8")  # no lone surrogate survives
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _module(path: str) -> str:
    name = path[: -len(".py")] if path.endswith(".py") else path
    if name.endswith("/__init__"):
        name = name[: -len("/__init__")]
    return name.replace("/", ".")


def _frame(path: str, line: int, function: str, source: str) -> dict[str, Any]:
    return {
        "module": _cut(_module(path), _MAX_NAME),
        "file": _cut(path, _MAX_NAME),
        "line": line,
        "function": _cut(function, _MAX_NAME),
        "source": _cut(source.strip(), _MAX_SOURCE),
    }


def tenant_frames(exc: BaseException) -> list[dict[str, Any]]:
    """The Version's own frames of ``exc``'s traceback, innermost last (see module doc).

    Never raises: anything odd (a traceback that cannot be read) gives fewer frames.
    """
    frames: list[dict[str, Any]] = []
    try:
        summary = traceback.extract_tb(exc.__traceback__)
        for entry in summary:
            filename = entry.filename
            if type(filename) is not str or not filename.startswith(VIRTUAL_ROOT):
                continue
            line = entry.lineno if type(entry.lineno) is int else 0
            frames.append(_frame(filename[len(VIRTUAL_ROOT) :], line, str(entry.name), entry.line or ""))
        if isinstance(exc, SyntaxError) and type(exc.filename) is str and exc.filename.startswith(VIRTUAL_ROOT):
            line = exc.lineno if type(exc.lineno) is int else 0
            text = exc.text if type(exc.text) is str else ""
            frames.append(_frame(exc.filename[len(VIRTUAL_ROOT) :], line, "<module>", text))
    except BaseException:  # noqa: BLE001 - a report must never fail the report
        pass
    return frames[-MAX_FRAMES:]


def location(frames: list[dict[str, Any]]) -> str | None:
    """``"main.py, line 3"`` for the innermost frame, or ``None`` without frames."""
    if not frames:
        return None
    last = frames[-1]
    return f"{last['file']}, line {last['line']}"


def clean_frames(value: object) -> list[dict[str, Any]] | None:
    """``value`` (from an untrusted child) as a frame list, or ``None`` when it is not one.

    A frame list is a list of at most :data:`MAX_FRAMES` objects with exactly the keys ``module``,
    ``file``, ``function``, ``source`` (strings) and ``line`` (a non-negative integer); strings
    are cut to their limits again.
    """
    if type(value) is not list or len(value) > MAX_FRAMES:
        return None
    frames = []
    for item in value:
        if type(item) is not dict or set(item) != _KEYS:
            return None
        line = item["line"]
        if type(line) is not int or not 0 <= line < 1 << 31:
            return None
        if any(type(item[key]) is not str for key in ("module", "file", "function", "source")):
            return None
        frames.append(
            {
                "module": _cut(item["module"], _MAX_NAME),
                "file": _cut(item["file"], _MAX_NAME),
                "line": line,
                "function": _cut(item["function"], _MAX_NAME),
                "source": _cut(item["source"], _MAX_SOURCE),
            }
        )
    return frames


def format_frames(frames: list[dict[str, Any]], *, indent: str = "  ") -> str:
    """Text of ``frames`` in Python's own layout (``File "main.py", line 3, in run`` + source)."""
    out = []
    for frame in frames:
        out.append(f'{indent}File "{frame["file"]}", line {frame["line"]}, in {frame["function"]}')
        if frame.get("source"):
            out.append(f"{indent}  {frame['source']}")
    return "\n".join(out)
