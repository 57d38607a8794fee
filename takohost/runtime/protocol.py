"""Framing and message shapes of the parent ↔ sandbox-child channel (see ``PROTOCOL.md``).

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON text
(``allow_nan=False``), whose value is an object with a string ``"op"``. A frame body larger than
``MAX_FRAME_BYTES`` (8 MiB; documents are at most 1 MiB, a Version's modules at most 4 MiB) is a
``ProtocolError``, as is a body that is not strict JSON (``takohost.domain.jsonstrict``: no NaN,
no duplicate keys, no lone surrogates).

Runs in the zygote, in the sandbox child and in the parent: standard library and
``takohost.domain`` only. The child is untrusted, so the parent checks every frame it receives
with ``check_child_message`` (shapes) and the domain validators (values) before using it.
"""

from __future__ import annotations

import re
import socket
import struct
from typing import Any

from takohost.domain import deepjson, identifiers, jsonstrict, tenant_logs

__all__ = [
    "CHILD_OPS",
    "FINAL_OPS",
    "MAX_FRAME_BYTES",
    "MAX_TEXT_CHARS",
    "PARENT_OPS",
    "PROTOCOL_VERSION",
    "CHILD_MAX_CONTAINERS",
    "FrameBuffer",
    "ProtocolError",
    "check_child_message",
    "decode_body",
    "encode_frame",
    "read_frame",
    "safe_text",
    "write_frame",
]

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 8 * 1024 * 1024
# Error messages and tracebacks sent by the child are cut to this many characters.
MAX_TEXT_CHARS = 4096

#: Arrays and objects one frame *from a child* may hold (the host's reader refuses more before
#: parsing). A child's frame carries at most one document, and a document of at most 1 MiB of
#: canonical JSON has at most 524 288 containers (each takes two bytes at least); a log frame has
#: 257. Without the bound an 8 MiB frame of ``[[[…`` cost the host's worker process about 5 s of
#: CPU and 700 MB of memory (outside the sandbox's memory cgroup) to parse before it was refused.
CHILD_MAX_CONTAINERS = 600_000
#: The most base64 characters of compiled modules a ``code`` frame or a job carries (PROTOCOL.md
#: "Compiled modules"); a Version whose code is larger compiles in every context.
CODE_MAX_CHARS = 2 * 1024 * 1024

_HEADER = struct.Struct(">I")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# Messages the parent sends to the child.
PARENT_OPS = frozenset(
    {"job", "ping", "resolve", "raise", "reject_args", "run_effect", "binding_result", "binding_error"}
)
# Messages the child sends to the parent.
CHILD_OPS = frozenset(
    {
        "hello",
        "do",
        "sleep",
        "wait",
        "effect_result",
        "binding",
        "run_returned",
        "run_failed",
        "mismatch",
        "validated",
        "import_error",
        "scheduled_done",
        "log",
    }
)
# After one of these the child sends nothing more and kills its own process group.
FINAL_OPS = frozenset(
    {"run_returned", "run_failed", "mismatch", "validated", "import_error", "scheduled_done"}
)

BINDING_CALLS = frozenset({"create", "get", "status", "send_event", "terminate"})


class ProtocolError(Exception):
    """A frame or message that breaks the protocol (size, JSON, shape). Not user-visible."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Return the frame bytes (length header + UTF-8 JSON) of ``message``.

    Raises ``ProtocolError`` when ``message`` is not JSON-serialisable without NaN/±inf, holds a
    lone surrogate (not UTF-8 encodable), or its body exceeds ``MAX_FRAME_BYTES``.
    """
    try:
        body = deepjson.dumps(message).encode("utf-8")  # any depth (docs/spec/host-features.md#hf-newcomer)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"message is not encodable as a frame: {exc}") from None
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame body of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def _containers(body: bytes, limit: int) -> int:
    """An upper bound of the arrays and objects of JSON text ``body``, exact once it exceeds
    ``limit`` (brackets inside strings are not counted then)."""
    count = body.count(b"[") + body.count(b"{")
    if count <= limit:
        return count
    outside = _STRING.sub(b"", body)
    return outside.count(b"[") + outside.count(b"{")


def decode_body(body: bytes, *, max_containers: int | None = None) -> dict[str, Any]:
    """Parse one frame body into a message ``dict`` with a ``str`` ``"op"``; with
    ``max_containers``, a body of more arrays and objects is refused unparsed.

    Raises ``ProtocolError`` for non-strict JSON, a non-object value, a missing ``op`` or too many
    containers.
    """
    if max_containers is not None and _containers(body, max_containers) > max_containers:
        raise ProtocolError(f"frame holds more than {max_containers} arrays and objects")
    try:
        value = jsonstrict.loads_strict(body)
    except jsonstrict.StrictJSONError as exc:
        raise ProtocolError(f"frame is not strict JSON: {exc.message}") from None
    if type(value) is not dict or type(value.get("op")) is not str:
        raise ProtocolError('a frame must hold a JSON object with a string "op"')
    return value


class FrameBuffer:
    """Incremental frame splitter for a byte stream (non-blocking readers, both sides).

    ``feed(data)`` appends received bytes and returns the complete messages they finish, in order;
    ``pending`` is the number of buffered bytes of an incomplete frame (non-zero at EOF means a
    truncated frame). Raises ``ProtocolError`` for an oversized length or a bad body.
    ``max_containers``: see :func:`decode_body` (the host reading a child passes
    :data:`CHILD_MAX_CONTAINERS`).
    """

    def __init__(self, *, max_containers: int | None = None) -> None:
        self._buffer = bytearray()
        self._max_containers = max_containers

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add ``data``; return every message completed by it (possibly none)."""
        self._buffer += data
        messages: list[dict[str, Any]] = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME_BYTES:
                raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            messages.append(decode_body(body, max_containers=self._max_containers))
        return messages


def write_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one frame on a blocking socket (``sendall``); OSError propagates."""
    sock.sendall(encode_frame(message))


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """Read exactly one frame from a blocking socket; ``None`` on EOF at a frame boundary.

    Raises ``ProtocolError`` on EOF inside a frame or a bad frame. Reads no byte beyond the frame
    (so it may be mixed with ``FrameBuffer`` readers afterwards).
    """
    header = _read_exact(sock, _HEADER.size, allow_eof=True)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
    body = _read_exact(sock, length, allow_eof=False)
    assert body is not None
    return decode_body(body)


def _read_exact(sock: socket.socket, size: int, *, allow_eof: bool) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        data = sock.recv(size - len(chunks))
        if not data:
            if allow_eof and not chunks:
                return None
            raise ProtocolError("end of stream inside a frame")
        chunks += data
    return bytes(chunks)


def safe_text(value: object, *, limit: int = MAX_TEXT_CHARS) -> str:
    """``value`` as frame-safe text: ``str()`` of it (``"<unprintable>"`` if that raises), lone
    surrogates replaced by U+FFFD, cut to ``limit`` characters. Used for user-derived messages."""
    try:
        text = value if type(value) is str else str(value)
    except BaseException:  # noqa: BLE001 - a user __str__ may raise anything
        text = "<unprintable>"
    if type(text) is not str:
        text = "<unprintable>"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _LONE_SURROGATE.sub("\ufffd", text)


# ---------------------------------------------------------------------------------------------
# Shape checks of child → parent messages (the child is untrusted).


def check_child_message(message: dict[str, Any]) -> dict[str, Any]:
    """Check that a decoded child message has the shape PROTOCOL.md gives for its ``op``.

    Returns ``message`` unchanged. Raises ``ProtocolError`` for an unknown op, a missing or
    extra field, or a field of the wrong JSON type; step names, event types and binding ids
    must also pass ``identifiers.validate_scalar_string``. Values are NOT checked as documents
    or policies here: the driver still runs ``documents.canonical_document`` on results/outputs
    and ``retry.parse_retry_policy`` on policies before storing them.
    """
    op = message.get("op")
    checker = _CHECKERS.get(op)  # type: ignore[arg-type]
    if checker is None:
        raise ProtocolError(f"unknown child message op {safe_text(op, limit=64)!r}")
    checker(message)
    return message


def _fields(
    message: dict[str, Any], *, required: set[str], optional: frozenset[str] | set[str] = frozenset()
) -> None:
    keys = set(message) - {"op"}
    missing = required - keys
    if missing:
        raise ProtocolError(f"{message['op']}: missing field(s) {sorted(missing)}")
    extra = keys - required - optional
    if extra:
        raise ProtocolError(f"{message['op']}: unknown field(s) {sorted(extra)}")


def _is_int(value: object) -> bool:
    return type(value) is int


def _require(condition: bool, message: dict[str, Any], what: str) -> None:
    if not condition:
        raise ProtocolError(f"{message['op']}: {what}")


def _name(message: dict[str, Any], key: str = "name") -> None:
    try:
        identifiers.validate_scalar_string(message.get(key), what=key)
    except TypeError as exc:
        raise ProtocolError(f"{message['op']}: {exc}") from None


def _args_error(message: dict[str, Any]) -> bool:
    """True if the message carries ``argsError`` (then the argument fields must be absent)."""
    if "argsError" not in message:
        return False
    _require(type(message["argsError"]) is str, message, "argsError must be a string")
    return True


def _check_hello(m: dict[str, Any]) -> None:
    _fields(m, required={"pid", "protocol"})
    _require(_is_int(m["pid"]) and m["pid"] > 0, m, "pid must be a positive integer")
    _require(m["protocol"] == PROTOCOL_VERSION and _is_int(m["protocol"]), m, "unsupported protocol")


def _check_do(m: dict[str, Any]) -> None:
    _name(m)
    if _args_error(m):
        _fields(m, required={"name", "argsError"})
        return
    _fields(m, required={"name", "policy"}, optional={"eager"})
    _require(type(m["policy"]) is dict, m, "policy must be an object")
    _require(m.get("eager", True) is True, m, "eager must be true when present")


def _check_sleep(m: dict[str, Any]) -> None:
    _name(m)
    if _args_error(m):
        _fields(m, required={"name", "argsError"})
        return
    _fields(m, required={"name", "seconds"})
    _require(_is_int(m["seconds"]), m, "seconds must be an integer")


def _check_wait(m: dict[str, Any]) -> None:
    _name(m)
    if _args_error(m):
        _fields(m, required={"name", "argsError"})
        return
    _fields(m, required={"name", "type", "timeoutSeconds"})
    _name(m, "type")
    _require(_is_int(m["timeoutSeconds"]), m, "timeoutSeconds must be an integer")


def _check_effect_result(m: dict[str, Any]) -> None:
    _name(m)
    _require(type(m.get("ok")) is bool, m, "ok must be a boolean")
    if m["ok"]:
        _fields(m, required={"name", "ok", "result"})
        _require(m["result"] is None or type(m["result"]) is dict, m, "result must be an object or null")
        return
    _fields(m, required={"name", "ok", "error"})
    error = m["error"]
    _require(
        type(error) is dict
        and {"type", "message"} <= set(error) <= {"type", "message", "traceback"}
        and type(error["type"]) is str
        and type(error["message"]) is str,
        m,
        "error must be {type: string, message: string, traceback?: [frame]}",
    )
    if "traceback" in error:
        _traceback(m, error["traceback"])


def _traceback(m: dict[str, Any], value: Any) -> None:
    """A ``traceback`` field: a list of frame objects (``tracebacks.clean_frames`` checks them
    fully on the host; here only the outer shape and size)."""
    _require(type(value) is list and len(value) <= 32, m, "traceback must be a list of at most 32 frames")
    _require(all(type(frame) is dict for frame in value), m, "traceback frames must be objects")


def _check_binding(m: dict[str, Any]) -> None:
    _fields(m, required={"binding", "call", "args"})
    _require(
        type(m["binding"]) is str and identifiers.VAR_NAME_RE.match(m["binding"]) is not None,
        m,
        "bad binding name",
    )
    _require(m["call"] in BINDING_CALLS, m, f"call must be one of {sorted(BINDING_CALLS)}")
    _require(type(m["args"]) is dict, m, "args must be an object")


def _check_run_returned(m: dict[str, Any]) -> None:
    _fields(m, required={"output"})
    _require(m["output"] is None or type(m["output"]) is dict, m, "output must be an object or null")


def _check_run_failed(m: dict[str, Any]) -> None:
    _fields(m, required={"reason", "message", "phase"}, optional={"step", "traceback"})
    if "traceback" in m:
        _traceback(m, m["traceback"])
    _require(m["reason"] in ("step_failed", "run_threw"), m, "reason must be step_failed or run_threw")
    _require(type(m["message"]) is str, m, "message must be a string")
    _require(m["phase"] in ("import", "construct", "run"), m, "phase must be import, construct or run")
    if "step" in m:
        _name(m, "step")


def _check_text_only(m: dict[str, Any]) -> None:
    _fields(m, required={"message"})
    _require(type(m["message"]) is str, m, "message must be a string")


def _check_validated(m: dict[str, Any]) -> None:
    _fields(m, required={"workflowClasses", "handlers"})
    for key in ("workflowClasses", "handlers"):
        value = m[key]
        _require(
            type(value) is list and all(type(v) is str for v in value), m, f"{key} must be a list of strings"
        )
    _require(set(m["handlers"]) <= {"scheduled"}, m, 'handlers may only contain "scheduled"')


def _check_scheduled_done(m: dict[str, Any]) -> None:
    _require(type(m.get("ok")) is bool, m, "ok must be a boolean")
    if m["ok"]:
        _fields(m, required={"ok"})
    else:
        _fields(m, required={"ok", "message"}, optional={"traceback"})
        _require(type(m["message"]) is str, m, "message must be a string")
        if "traceback" in m:
            _traceback(m, m["traceback"])


def _check_log(m: dict[str, Any]) -> None:
    """``log {lines: [[time_ms, stream, text], ...], dropped}`` (PROTOCOL.md "Logs")."""
    _fields(m, required={"lines", "dropped"})
    lines, dropped = m["lines"], m["dropped"]
    _require(_is_int(dropped) and 0 <= dropped < 1 << 53, m, "dropped must be a non-negative integer")
    _require(type(lines) is list and len(lines) <= tenant_logs.FRAME_LINES, m, "too many lines in one frame")
    for line in lines:
        _require(
            type(line) is list
            and len(line) == 3
            and _is_int(line[0])
            and line[1] in tenant_logs.TENANT_STREAMS
            and type(line[2]) is str
            and len(line[2]) <= tenant_logs.MAX_LINE_CHARS,
            m,
            "a line must be [time_ms, stdout|stderr, text of at most MAX_LINE_CHARS]",
        )


def _check_code(m: dict[str, Any]) -> None:
    _fields(m, required={"modules"})
    modules = m["modules"]
    _require(type(modules) is dict and bool(modules), m, "modules must be a non-empty object")
    _require(all(type(blob) is str for blob in modules.values()), m, "each module's code must be a string")


_CHECKERS = {
    "hello": _check_hello,
    "code": _check_code,
    "do": _check_do,
    "sleep": _check_sleep,
    "wait": _check_wait,
    "effect_result": _check_effect_result,
    "binding": _check_binding,
    "run_returned": _check_run_returned,
    "run_failed": _check_run_failed,
    "mismatch": _check_text_only,
    "validated": _check_validated,
    "import_error": _check_text_only,
    "scheduled_done": _check_scheduled_done,
    "log": _check_log,
}
