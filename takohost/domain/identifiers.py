"""Identifier, name and step-argument rules (docs/spec/durable-workflow.md#dw-resource, docs/spec/http-api.md#api-res, docs/spec/worker-forms.md#wf-version, docs/spec/durable-workflow.md#dw-step, docs/spec/host-limits.md#hl-decisions; pure).

* Instance ids, step names, event types — docs/spec/durable-workflow.md#dw-instance-id: "idは1〜256 Unicodeスカラー値",
  "nameとevent typeは1〜256 Unicodeスカラー値": a ``str`` of 1..256 code points, none of them a
  surrogate (U+D800..U+DFFF). Python counts code points, so 256 × U+1F600 is valid (it would be
  512 UTF-16 units); a Python "surrogate pair" such as ``"\\ud83d\\ude00"`` is two lone
  surrogates, not a scalar value, and is invalid. Only exact ``str`` is accepted (no subclasses,
  whose methods are user code).
* Step arguments — docs/spec/durable-workflow.md#dw-step-sleep "• sleep: secondsは0〜31536000整数", "• waitForEvent:
  typeとtimeoutSeconds（1〜31536000整数）は必須": integers only (``bool`` and ``float`` are not).

Every violation raises ``TypeError`` (catchable in workflow code; HTTP maps it to
``400 invalid_request``, docs/spec/host-limits.md#hl-decisions). The regexes use ``\\A``/``\\Z`` so that ``match`` and
``fullmatch`` both refuse a trailing newline (``$`` would accept one).
"""

from __future__ import annotations

import re

__all__ = [
    "CLASS_NAME_RE",
    "MAX_SCALAR_STRING_LENGTH",
    "MAX_STEP_SECONDS",
    "MODULE_NAME_RE",
    "RESOURCE_NAME_RE",
    "VAR_NAME_RE",
    "validate_int_in_range",
    "validate_scalar_string",
    "validate_sleep_seconds",
    "validate_timeout_seconds",
    "validate_wait_options",
]

MAX_SCALAR_STRING_LENGTH = 256
MAX_STEP_SECONDS = 31_536_000

# docs/spec/http-api.md#api-res: resource names, 1..63 characters.
RESOURCE_NAME_RE = re.compile(r"\A[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
# docs/spec/durable-workflow.md#dw-resource: DurableWorkflow className (``$`` allowed by the Form, docs/spec/durable-workflow.md#dw-abi).
CLASS_NAME_RE = re.compile(r"\A[A-Za-z_$][A-Za-z0-9_$]{0,63}\Z")
# docs/spec/worker-forms.md#wf-version: vars and workflowBindings[].name.
VAR_NAME_RE = re.compile(r"\A[A-Z_][A-Z0-9_]*\Z")
# docs/spec/worker-forms.md#wf-version: module file names, optionally under package directories ("pkg/sub/mod.py").
MODULE_NAME_RE = re.compile(r"\A(?:[A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*\.py\Z")

_SURROGATE = re.compile("[\ud800-\udfff]")


def validate_scalar_string(value: object, *, what: str) -> str:
    """Return ``value`` if it is a ``str`` of 1..256 Unicode scalar values, else ``TypeError``.

    ``what`` names the argument in the message ("instance id", "step name", "event type").
    """
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise TypeError(f"{what} must not be empty")
    if len(value) > MAX_SCALAR_STRING_LENGTH:
        raise TypeError(f"{what} is {len(value)} characters; at most {MAX_SCALAR_STRING_LENGTH} are allowed")
    if _SURROGATE.search(value) is not None:
        raise TypeError(
            f"{what} contains a lone surrogate (U+D800..U+DFFF); it must be Unicode scalar values"
        )
    return value


def validate_sleep_seconds(value: object) -> int:
    """``step.sleep`` seconds: an ``int`` 0..31536000 (0 completes in place), else ``TypeError``."""
    return validate_int_in_range(value, what="sleep seconds", low=0, high=MAX_STEP_SECONDS)


def validate_timeout_seconds(value: object) -> int:
    """``step.wait_for_event`` timeoutSeconds: an ``int`` 1..31536000, else ``TypeError``."""
    return validate_int_in_range(value, what="timeoutSeconds", low=1, high=MAX_STEP_SECONDS)


def validate_wait_options(options: object) -> tuple[str, int]:
    """Validate ``{"type": t, "timeoutSeconds": s}`` and return ``(t, s)``.

    ``options`` must be an exact ``dict`` with exactly those two keys, both required (docs/spec/durable-workflow.md:
    "typeとtimeoutSeconds…は必須"); ``t`` a scalar string, ``s`` an int 1..31536000.
    Raises ``TypeError`` otherwise.
    """
    if type(options) is not dict:
        raise TypeError(
            f'wait_for_event options must be a dict {{"type", "timeoutSeconds"}}, not {type(options).__name__}'
        )
    keys = list(options)
    for key in keys:
        if type(key) is not str or key not in ("type", "timeoutSeconds"):
            shown = repr(key) if type(key) is str else f"a {type(key).__name__} key"
            raise TypeError(f"wait_for_event options have unknown key {shown}")
    for required in ("type", "timeoutSeconds"):
        if required not in options:
            raise TypeError(f"wait_for_event options need {required!r}")
    event_type = validate_scalar_string(options["type"], what="event type")
    return event_type, validate_timeout_seconds(options["timeoutSeconds"])


def validate_int_in_range(value: object, *, what: str, low: int, high: int) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) within ``low..high``, else ``TypeError``.

    ``float`` values are rejected even when integral (``2.0``): the spec asks for integers (docs/spec/durable-workflow.md#dw-step-do).
    """
    if type(value) is not int:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise TypeError(f"{what} must be between {low} and {high}, got {value}")
    return value
