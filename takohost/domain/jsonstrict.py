"""Strict JSON text parsing for HTTP bodies (docs/spec/http-api.md API-json; pure, no I/O).

docs/spec/http-api.md: "JSON text is parsed strictly: ``NaN``, ``Infinity``, ``-Infinity``, duplicate object
keys, lone surrogates and invalid UTF-8 are rejected with ``400 invalid_json``."

This is the standard library's ``json`` decoder with hooks, not a parser of our own:

* the bytes are decoded as UTF-8 with ``errors="strict"``; a byte order mark is rejected (RFC 8259
  §8.1: senders must not add one), as are UTF-16/32 texts that ``json.loads(bytes)`` would sniff;
* ``parse_constant`` rejects the ``NaN``/``Infinity``/``-Infinity`` literals;
* ``parse_float`` rejects numbers that overflow a double (``1e400`` would become ``inf``);
* ``object_pairs_hook`` rejects a repeated member name in any object (Python keeps the last);
* after parsing, every string and member name is checked for U+D800..U+DFFF, which only a
  ``\\ud800``-style escape without its partner can produce (a valid escaped pair such as
  ``\\ud83d\\ude00`` is joined into one character by the decoder) — so only a text holding such
  an escape is walked;
* trailing non-whitespace, control characters inside strings and every other syntax error are
  the decoder's own ``JSONDecodeError``.

Integers stay ``int`` whatever their size (up to the interpreter's 4300-digit conversion limit,
beyond which the text is rejected); the document rules (``documents.canonical_document``) reject
those outside ±(2**53−1). Nesting has no limit (docs/spec/host-limits.md#hl-decisions, docs/spec/host-features.md#hf-newcomer): a text too deep for
the C decoder is parsed again by ``deepjson``'s iterative parser with the same hooks, so the
rules above hold at any depth.
"""

from __future__ import annotations

import json
import math
import re

from takohost.domain import deepjson

__all__ = ["StrictJSONError", "loads_strict"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: The only way a strictly decoded UTF-8 text yields a surrogate: an escape ``\\uD800``..``\\uDFFF``.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class StrictJSONError(ValueError):
    """The body is not strict JSON (maps to ``400 invalid_json``); ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def loads_strict(raw: bytes) -> object:
    """Parse a JSON text given as UTF-8 ``bytes`` into plain Python values.

    Returns ``dict``/``list``/``str``/``int``/``float``/``bool``/``None`` as ``json.loads`` does
    (objects are exact ``dict``s in document order). Raises ``StrictJSONError`` for anything
    docs/spec/README.md API-json rejects (see the module docstring); ``TypeError`` if ``raw`` is not bytes.
    """
    if not isinstance(raw, (bytes, bytearray)):
        raise TypeError(f"loads_strict takes bytes, not {type(raw).__name__}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError(f"body is not valid UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise StrictJSONError("body starts with a byte order mark")
    try:
        value = deepjson.loads_with(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # e.g. an integer literal beyond the int conversion digit limit
        raise StrictJSONError(f"invalid JSON number: {exc}") from None
    if _SURROGATE_ESCAPE.search(text) is not None:  # else no string of it can hold one
        _reject_lone_surrogates(value)
    return value


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate object key {_quoted(key)}")
            seen.add(key)
    return result


def _reject_constant(literal: str) -> object:
    raise StrictJSONError(f"{literal} is not a JSON value")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise StrictJSONError(f"number {literal[:40]} is out of the range of a double")
    return value


def _reject_lone_surrogates(value: object) -> None:
    """Walk the parsed value iteratively; raise if any string or key holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if _LONE_SURROGATE.search(item) is not None:
                raise StrictJSONError("a string contains a lone surrogate escape")
        elif type(item) is dict:
            if _LONE_SURROGATE.search("".join(item)) is not None:
                raise StrictJSONError("an object key contains a lone surrogate escape")
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)


def _quoted(key: str) -> str:
    shown = key if len(key) <= 40 else key[:40] + "…"
    return json.dumps(shown)
