"""Documents: validation and RFC 8785 canonical bytes (docs/spec/durable-workflow.md#dw-doc DW-doc; pure, no I/O).

Params, step results, event payloads and outputs are documents (docs/spec/durable-workflow.md#dw-doc): a plain
object root of at most 1024 properties and at most 1 048 576 bytes of RFC 8785 canonical UTF-8;
inside only null, booleans, finite numbers, Unicode strings, such objects and dense arrays; cycles
are rejected, shared non-cyclic objects are fine; nothing user-defined runs while serialising.

Python rendering (docs/spec/durable-workflow.md#dw-doc):

* root: exactly ``dict`` with ``str`` keys, or ``None`` where "none" is allowed;
* inside: ``None``, ``bool``, ``int`` within ±(2**53−1) (``bool`` is a boolean, never an int),
  finite ``float``, ``str``, exact ``dict`` with ``str`` keys, exact ``list``;
* every ``str`` (values and keys) consists of Unicode scalar values: no U+D800–U+DFFF;
* every ``dict``, the root and each nested one, has at most ``MAX_KEYS`` (1024) keys;
* cycles are invalid; shared non-cyclic sub-objects are fine and count once per occurrence;
* tuples, sets, bytes, ``dict``/``list`` subclasses (``OrderedDict``), ``int``/``float``/``str``
  subclasses, NaN/±inf and every other type are invalid;
* size = length of the RFC 8785 canonical UTF-8 form, at most ``MAX_DOCUMENT_BYTES``.

Nothing user-defined is ever called: every value is classified by ``type(x) is …`` before it is
touched, containers are snapshotted with the C-level ``list(d.items())`` / ``list(l)``, and error
messages never ``repr`` a value of a foreign type.

Depth (docs/spec/host-limits.md#hl-decisions, docs/spec/host-features.md#hf-newcomer): the Form sets no depth
limit (docs/spec/durable-workflow.md#dw-doc), so none is added — any nesting that fits the key and byte limits
is a document (the deepest 1 MiB document nests about 524 000 levels). The walk and the serialiser here are
iterative; the host's other tools on stored documents (JSON text in and out, the sandbox frames, the Postgres
columns) go through ``takohost.domain.deepjson``, which has no recursion limit either. ``vars`` of a
WorkerVersion are the one exception: they are copied and compared with recursive stdlib tools, so their
validation passes ``max_depth=VARS_MAX_DEPTH`` (512; ``invalid_spec`` beyond).

``rfc8785`` serialises every float and every string that needs an escape (its escaping and
ECMAScript number formatting are right: checked against Node 20 ``JSON.stringify`` on 200 000
random doubles and on random documents); a string with nothing to escape is written as its quoted
UTF-8 directly, which is byte-for-byte what the package writes (pinned by a property test).
Containers are written by an iterative loop here instead of ``rfc8785.dumps(root)``, because the
package recurses once per level and accepts values we reject (``OrderedDict``, tuples, ``str``
subclasses), so it only ever sees validated scalars.
"""

from __future__ import annotations

import math
import re

import rfc8785

from takohost.domain import deepjson

__all__ = [
    "VARS_MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_KEYS",
    "MAX_SAFE_INTEGER",
    "DocumentTooLargeError",
    "InvalidDocument",
    "canonical_document",
]

MAX_DOCUMENT_BYTES = 1_048_576
MAX_KEYS = 1024
VARS_MAX_DEPTH = 512
MAX_SAFE_INTEGER = 2**53 - 1

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# RFC 8785 §3.2.2.2: only '"', '\\' and U+0000..U+001F are escaped in strings.
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\]')
# Serialising stops once this many bytes are written; beyond it a reported size is a lower bound.
_EXACT_SIZE_LIMIT = 2 * MAX_DOCUMENT_BYTES

# A container's children as (JSON pointer token, value): dict items sorted the RFC 8785 way
# (by UTF-16 code units), list items as (index, value).
_Children = list[tuple[str | int, object]]


class InvalidDocument(ValueError):
    """The value is not a document (maps to ``invalid_params`` for params and payloads).

    ``pointer`` is the RFC 6901 JSON pointer of the offending place (``""`` is the root,
    ``"/a/3"`` is item 3 of key ``a``); ``message`` says what is wrong there.
    """

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(pointer, message)
        self.pointer = pointer
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} (at JSON pointer {self.pointer!r})"


class DocumentTooLargeError(ValueError):
    """The canonical form exceeds ``MAX_DOCUMENT_BYTES`` (maps to ``document_too_large``).

    ``size`` is the canonical size in bytes when ``exact``; otherwise serialisation stopped
    early (beyond 2 MiB) and ``size`` is a lower bound.
    """

    def __init__(self, size: int, exact: bool = True) -> None:
        super().__init__(size, exact)
        self.size = size
        self.exact = exact

    def __str__(self) -> str:
        amount = f"{self.size}" if self.exact else f"more than {self.size}"
        return f"document is {amount} bytes in RFC 8785 form; the limit is {MAX_DOCUMENT_BYTES}"


def canonical_document(value: object, *, allow_none: bool, max_depth: int | None = None) -> bytes | None:
    """Validate a document and return its RFC 8785 canonical UTF-8 bytes.

    ``value`` is the Python value (a ``dict`` root); ``allow_none`` says whether ``None`` means
    "no document" here (step results, outputs, binding params/payload defaults), in which case
    ``None`` is returned. ``len(result)`` is the document's size in bytes (docs/spec/durable-workflow.md#dw-doc).

    ``max_depth`` (levels, the root being level 1) is ``None`` for every document of
    docs/spec/durable-workflow.md#dw-doc (no depth limit); only ``vars`` pass ``VARS_MAX_DEPTH``. Raises
    ``InvalidDocument`` (→ ``invalid_params``; also for nesting beyond ``max_depth``) and, for a valid
    document whose canonical form exceeds ``MAX_DOCUMENT_BYTES``, ``DocumentTooLargeError`` (→
    ``document_too_large``). Validity is decided first: an invalid and oversized value raises
    ``InvalidDocument``.
    """
    if value is None:
        if allow_none:
            return None
        raise InvalidDocument("", "a document is required here; None is not a document")
    if type(value) is not dict:
        raise InvalidDocument("", f"the document root must be a dict, not {_type_name(value)}")
    with deepjson.paused_gc():  # one snapshot per container: see deepjson.paused_gc
        snapshots = _validate(value, max_depth=max_depth)
        return _serialize(value, snapshots)


def _validate(root: dict, *, max_depth: int | None) -> dict[int, _Children]:
    """Check every value under ``root``; return the children snapshot of each container by id.

    Iterative depth-first walk. ``on_path`` holds the ids of the containers on the current path
    (a repeat is a cycle); ``heights`` memoises finished containers so a shared sub-object is
    walked once and only its height is re-checked against ``max_depth`` where it reappears.
    """
    limit = max_depth if max_depth is not None else -1
    snapshots: dict[int, _Children] = {id(root): _children(root, [])}
    heights: dict[int, int] = {}
    on_path: set[int] = {id(root)}
    # frame = [container id, children, next index, tallest child height, token from parent]
    frames: list[list] = [[id(root), snapshots[id(root)], 0, 0, None]]
    while frames:
        frame = frames[-1]
        children = frame[1]
        index = frame[2]
        count = len(children)
        # Scalars are checked in this inner loop; it breaks out only to descend or finish.
        while index < count:
            token, child = children[index]
            index += 1
            kind = type(child)
            if kind is str:
                if _LONE_SURROGATE.search(child) is not None:  # type: ignore[arg-type]
                    raise InvalidDocument(
                        _pointer(frames, token), "a string contains a lone surrogate (U+D800..U+DFFF)"
                    )
            elif kind is dict or kind is list:
                break
            else:
                _check_scalar(child, kind, frames, token)
        else:
            frames.pop()
            on_path.discard(frame[0])
            height = frame[3] + 1
            heights[frame[0]] = height
            if frames and frames[-1][3] < height:
                frames[-1][3] = height
            continue
        frame[2] = index
        child_id = id(child)
        if child_id in on_path:
            raise InvalidDocument(_pointer(frames, token), "cycle: a container contains itself")
        height = heights.get(child_id)
        if height is None:
            if limit >= 0 and len(frames) + 1 > limit:
                raise InvalidDocument(_pointer(frames, token), f"nesting deeper than {limit}")
            grandchildren = _children(child, frames, token)  # type: ignore[arg-type]
            snapshots[child_id] = grandchildren
            on_path.add(child_id)
            frames.append([child_id, grandchildren, 0, 0, token])
            continue
        if limit >= 0 and len(frames) + height > limit:
            raise InvalidDocument(_pointer(frames, token), f"nesting deeper than {limit}")
        if frame[3] < height:
            frame[3] = height
    return snapshots


def _children(container: dict | list, frames: list[list], token: str | int | None = None) -> _Children:
    """Snapshot a container's children; for a dict also check its keys and sort them."""
    if type(container) is list:
        return list(enumerate(container))
    items = list(container.items())  # type: ignore[union-attr]  # a dict: the exact-type test above
    if len(items) > MAX_KEYS:
        raise InvalidDocument(
            _pointer(frames, token), f"an object has {len(items)} keys; at most {MAX_KEYS} are allowed"
        )
    if not items:
        return items
    keys = [key for key, _ in items]
    key_types = set(map(type, keys))
    if key_types != {str}:
        key_types.discard(str)
        raise InvalidDocument(
            _pointer(frames, token), f"object keys must be str, found a {_type_name_of(key_types.pop())} key"
        )
    all_keys = "".join(keys)
    if _LONE_SURROGATE.search(all_keys) is not None:
        raise InvalidDocument(
            _pointer(frames, token), "an object key contains a lone surrogate (U+D800..U+DFFF)"
        )
    # RFC 8785 §3.2.3: members sorted by the UTF-16 code units of their names. That is code point
    # order (plain str comparison) unless a name has a character beyond U+FFFF. Keys are unique,
    # so comparing the (key, value) tuples never reaches the values.
    if _ASTRAL.search(all_keys) is None:
        items.sort()
    else:
        items.sort(key=lambda item: item[0].encode("utf-16-be"))
    return items


def _check_scalar(value: object, kind: type, frames: list[list], token: str | int) -> None:
    """Raise ``InvalidDocument`` unless ``value`` (of type ``kind``, not str) is a document scalar."""
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            return
        problem = "an integer outside ±(2**53-1)"
    elif kind is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return
        problem = f"a non-finite number ({value})"
    elif value is None or kind is bool:
        return
    else:
        problem = f"a value of type {_type_name(value)} is not allowed in a document"
    raise InvalidDocument(_pointer(frames, token), problem)


def _serialize(root: dict, snapshots: dict[int, _Children]) -> bytes:
    """Write the RFC 8785 form of a validated document from its snapshots, iteratively."""
    parts: list[bytes] = [b"{"]
    append = parts.append
    size = 1
    key_bytes: dict[str, bytes] = {}
    # entry = [is_object, children, next index]
    stack: list[list] = [[True, snapshots[id(root)], 0]]
    while stack:
        entry = stack[-1]
        is_object, children, index = entry
        count = len(children)
        while index < count:
            if index:
                append(b",")
                size += 1
            token, child = children[index]
            index += 1
            if is_object:
                encoded_key = key_bytes.get(token)  # type: ignore[arg-type]
                if encoded_key is None:
                    encoded_key = key_bytes[token] = rfc8785.dumps(token) + b":"  # type: ignore[index]
                append(encoded_key)
                size += len(encoded_key)
            kind = type(child)
            if kind is dict or kind is list:
                break
            if kind is str and len(child) > _EXACT_SIZE_LIMIT:  # type: ignore[arg-type]
                raise DocumentTooLargeError(size + len(child) + 2, exact=False)  # type: ignore[arg-type]
            encoded = _scalar_bytes(child, kind)
            append(encoded)
            size += len(encoded)
            if size > _EXACT_SIZE_LIMIT:
                raise DocumentTooLargeError(size, exact=False)
        else:
            append(b"}" if is_object else b"]")
            size += 1
            stack.pop()
            continue
        entry[2] = index
        append(b"{" if kind is dict else b"[")
        size += 1
        stack.append([kind is dict, snapshots[id(child)], 0])
    if size > MAX_DOCUMENT_BYTES:
        raise DocumentTooLargeError(size)
    return b"".join(parts)


def _scalar_bytes(value: object, kind: type) -> bytes:
    """RFC 8785 bytes of a validated scalar."""
    if kind is str:
        if _NEEDS_ESCAPE.search(value) is None:  # type: ignore[call-overload]
            # Nothing to escape: rfc8785 would write exactly the quoted UTF-8 (checked by tests).
            return b'"' + value.encode("utf-8") + b'"'  # type: ignore[attr-defined]
        return rfc8785.dumps(value)  # type: ignore[arg-type]
    if value is None:
        return b"null"
    if kind is bool:
        return b"true" if value else b"false"
    if kind is int:
        return str(value).encode("ascii")  # a safe integer: the same digits as ECMAScript
    return rfc8785.dumps(value)  # type: ignore[arg-type]  # a finite float


def _pointer(frames: list[list], token: str | int | None) -> str:
    """RFC 6901 pointer of ``token`` inside the container on top of ``frames``."""
    tokens = [frame[4] for frame in frames[1:]]
    if token is not None:
        tokens.append(token)
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _type_name(value: object) -> str:
    """The name of ``value``'s type (see ``_type_name_of``)."""
    return _type_name_of(type(value))


def _type_name_of(kind: type) -> str:
    """A type's name, read without running a metaclass ``__name__`` property."""
    return type.__dict__["__name__"].__get__(kind)
