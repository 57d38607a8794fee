"""JSON text of any nesting depth, without recursion limits (docs/spec/host-features.md#hf-newcomer; docs/spec/host-limits.md#hl-decisions
"Document depth"; pure, stdlib only — the sandbox child imports it too).

The standard library's C decoder and encoder recurse once per nesting level against the
interpreter's recursion limit (about 990 levels by default), but a document may nest as deep as
its 1 MiB canonical form allows (about 524 000 levels of ``[``). Every function here first runs the
C implementation (fast: every document of ordinary depth takes that path) and only when it
raises ``RecursionError`` redoes the work with an explicit stack:

* :func:`loads` / :func:`loads_with` — parse JSON text (``loads_with`` takes the same hooks as
  ``json.loads``: ``object_pairs_hook``, ``parse_float``, ``parse_constant``, so the strict HTTP
  parser ``jsonstrict.loads_strict`` keeps its rules at any depth). Syntax errors are
  ``json.JSONDecodeError`` from both paths.
* :func:`dumps` — compact JSON text (``separators=(",", ":")``, NaN/±inf refused with
  ``ValueError``, a non-JSON value with ``TypeError``), key order kept.
* :func:`dumps_stored` / :func:`loads_stored` — the form documents take in a Postgres ``json``
  column. PostgreSQL's own JSON parser is recursive too (``stack depth limit exceeded`` at about
  30 000 levels with the default 2 MB ``max_stack_depth``), so a value too deep for the C encoder
  is stored as one JSON *string* holding ``DEEP_MARKER`` + its JSON text (depth 1 for the
  database); :func:`loads_stored` returns the original value for both forms. No column ever holds
  a top-level string otherwise (every stored value is an object or SQL NULL).
"""

from __future__ import annotations

import contextlib
import gc
import json
import json.decoder
import json.scanner
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DEEP_MARKER", "dumps", "dumps_stored", "loads", "loads_stored", "loads_with", "paused_gc"]

#: Prefix of the string that stands for a value too deep for the C encoder (see module doc).
DEEP_MARKER = "takohost:deep-json:v1:"

#: Typed ``Any``: it matches at every position (zero width allowed), so ``.match`` is never None.
_WS: Any = re.compile(r"[ \t\n\r]*")
_NUMBER = json.scanner.NUMBER_RE
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # public, untyped in typeshed
_encode_str = json.encoder.encode_basestring  # C version when available
_encode_str_ascii = json.encoder.encode_basestring_ascii


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block (restored after, if it was on).

    The iterative walks allocate one container per level and create no cycles; with collection
    on, a 500 000-level document triggers thousands of collections that each traverse the whole
    (growing) structure: about 3x slower (measured: 14.0 s → 5.3 s to canonicalise one).
    Another thread's pause is respected: only the thread that turned collection off turns it on.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` at any depth (see the module docstring)."""
    return loads_with(text)


def loads_with(
    text: str | bytes,
    *,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    parse_float: Callable[[str], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads(text, object_pairs_hook=…, parse_float=…, parse_constant=…)`` at any depth.

    Raises ``json.JSONDecodeError`` for invalid JSON, and whatever a hook raises.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    try:
        return json.loads(
            text, object_pairs_hook=object_pairs_hook, parse_float=parse_float, parse_constant=parse_constant
        )
    except RecursionError:
        pass
    with paused_gc():
        return _Parser(
            text,
            pairs_hook=object_pairs_hook or dict,
            parse_float=parse_float or float,
            parse_constant=parse_constant or _CONSTANTS.__getitem__,
        ).parse()


_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class _Parser:
    """An iterative JSON parser: a stack of open containers instead of recursive calls. Strings
    are decoded by the stdlib's ``scanstring`` and numbers matched by its ``NUMBER_RE``, so the
    values (and the error messages) are the decoder's own."""

    def __init__(self, text: str, *, pairs_hook, parse_float, parse_constant) -> None:  # noqa: ANN001
        self.text = text
        self.pairs_hook = pairs_hook
        self.parse_float = parse_float
        self.parse_constant = parse_constant

    def _error(self, message: str, pos: int) -> json.JSONDecodeError:
        return json.JSONDecodeError(message, self.text, pos)

    def parse(self) -> Any:
        text = self.text
        pos = _WS.match(text, 0).end()
        # stack entries: [is_object, items, pending key (objects)]
        stack: list[list] = []
        while True:
            # -- one value at pos --
            if pos >= len(text):
                raise self._error("Expecting value", pos)
            char = text[pos]
            if char == "{" or char == "[":
                pos = _WS.match(text, pos + 1).end()
                if char == "{":
                    if text.startswith("}", pos):
                        value, pos = self.pairs_hook([]), pos + 1
                    else:
                        if not text.startswith('"', pos):
                            raise self._error("Expecting property name enclosed in double quotes", pos)
                        key, pos = _scanstring(text, pos + 1, True)
                        pos = self._colon(pos)
                        stack.append([True, [], key])
                        continue
                else:
                    if text.startswith("]", pos):
                        value, pos = [], pos + 1
                    else:
                        stack.append([False, [], None])
                        continue
            else:
                value, pos = self._scalar(pos)
            # -- close containers while the value ends one --
            while True:
                if not stack:
                    end = _WS.match(text, pos).end()
                    if end != len(text):
                        raise self._error("Extra data", end)
                    return value
                top = stack[-1]
                if top[0]:
                    top[1].append((top[2], value))
                else:
                    top[1].append(value)
                pos = _WS.match(text, pos).end()
                closer = "}" if top[0] else "]"
                if text.startswith(",", pos):
                    pos = _WS.match(text, pos + 1).end()
                    if top[0]:
                        if not text.startswith('"', pos):
                            raise self._error("Expecting property name enclosed in double quotes", pos)
                        top[2], pos = _scanstring(text, pos + 1, True)
                        pos = self._colon(pos)
                    break  # parse the next value
                if text.startswith(closer, pos):
                    stack.pop()
                    value = self.pairs_hook(top[1]) if top[0] else top[1]
                    pos += 1
                    continue
                raise self._error("Expecting ',' delimiter", pos)

    def _colon(self, pos: int) -> int:
        pos = _WS.match(self.text, pos).end()
        if not self.text.startswith(":", pos):
            raise self._error("Expecting ':' delimiter", pos)
        return _WS.match(self.text, pos + 1).end()

    def _scalar(self, pos: int) -> tuple[Any, int]:
        text = self.text
        char = text[pos]
        if char == '"':
            return _scanstring(text, pos + 1, True)
        for literal, value in (("null", None), ("true", True), ("false", False)):
            if text.startswith(literal, pos):
                return value, pos + len(literal)
        for literal in ("NaN", "Infinity", "-Infinity"):
            if text.startswith(literal, pos):
                return self.parse_constant(literal), pos + len(literal)
        match = _NUMBER.match(text, pos)
        if match is None:
            raise self._error("Expecting value", pos)
        integer, fraction, exponent = match.groups()
        if fraction or exponent:
            return self.parse_float(integer + (fraction or "") + (exponent or "")), match.end()
        return int(integer), match.end()


def dumps(value: Any, *, ensure_ascii: bool = False) -> str:
    """Compact JSON text of ``value`` (``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
    finite ``float``, ``bool``, ``None``) at any depth; ``ValueError`` for NaN/±inf,
    ``TypeError`` for anything else."""
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=ensure_ascii, separators=(",", ":"))
    except RecursionError:
        pass
    return _dumps_iterative(value, ensure_ascii=ensure_ascii)


def _dumps_iterative(root: Any, *, ensure_ascii: bool) -> str:
    with paused_gc():
        return _dumps_loop(root, ensure_ascii=ensure_ascii)


def _dumps_loop(root: Any, *, ensure_ascii: bool) -> str:
    encode = _encode_str_ascii if ensure_ascii else _encode_str
    out: list[str] = []
    append = out.append
    # stack entries: [is_object, iterator]
    stack: list[list] = []
    value = root
    while True:
        kind = type(value)
        if kind is dict or isinstance(value, dict):
            append("{")
            stack.append([True, iter(value.items()), True])
        elif kind is list or isinstance(value, (list, tuple)):
            append("[")
            stack.append([False, iter(value), True])
        else:
            append(_scalar_text(value, encode))
        # find the next value to write
        while stack:
            top = stack[-1]
            try:
                item = next(top[1])
            except StopIteration:
                append("}" if top[0] else "]")
                stack.pop()
                continue
            if not top[2]:
                append(",")
            top[2] = False
            if top[0]:
                key, item = item
                if type(key) is not str:
                    raise TypeError(f"keys must be str, not {type(key).__name__}")
                append(encode(key))
                append(":")
            value = item
            break
        else:
            return "".join(out)


def _scalar_text(value: Any, encode: Callable[[str], str]) -> str:
    if isinstance(value, str):
        return encode(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return float.__repr__(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: ``json.dumps(value, allow_nan=False, separators=(",", ":"))``'s encoder, made once: every stored
#: document and history record goes through it (the engine's and ``send_event``'s commits), and
#: ``json.dumps`` with arguments builds a new encoder per call. Stateless, so shared by threads.
_STORED_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def dumps_stored(value: Any) -> str:
    """The text to put in a Postgres ``json`` column for ``value`` (see the module docstring)."""
    try:
        return _STORED_ENCODER.encode(value)
    except RecursionError:
        pass
    return json.dumps(DEEP_MARKER + _dumps_iterative(value, ensure_ascii=False), ensure_ascii=False)


def loads_stored(text: str | bytes) -> Any:
    """The value of a Postgres ``json`` column's text written by :func:`dumps_stored` (or by
    anything else: plain JSON is returned as it is)."""
    value = loads(text)
    if type(value) is str and value.startswith(DEEP_MARKER):
        return loads(value[len(DEEP_MARKER):])
    return value
