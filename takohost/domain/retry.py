"""``step.do`` retry policies and their delays (docs/spec/durable-workflow.md#dw-step, docs/spec/durable-workflow.md#dw-step-do "• do:"; pure, no I/O).

docs/spec/durable-workflow.md#dw-step-do: without a retry policy there is one attempt. A given policy has
``maxAttempts`` 1..100, ``initialDelaySeconds`` (default 0), ``backoff`` ``"constant"`` (default) or
``"exponential"`` and ``maxDelaySeconds`` (default 43200); delays are integers 0..43200, and the delay
after failed attempt k is ``min(maxDelaySeconds, initialDelaySeconds)`` for constant and
``min(maxDelaySeconds, initialDelaySeconds * 2^(k-1))`` for exponential.

Decision: inside a given policy ``maxAttempts`` is **required**. The Form gives defaults for
``initialDelaySeconds``, ``backoff`` and ``maxDelaySeconds`` only; ``maxAttempts: 1`` is the meaning of
omitting the whole policy, and "a given policy has maxAttempts 1..100" states what a specified policy carries
(docs/spec/durable-workflow.md#dw-step-do: required inside a given policy). So ``{"backoff": "exponential"}``
is a ``TypeError``.

All values are seconds (integers). Every violation is a ``TypeError`` raised in the workflow
(catchable, docs/spec/durable-workflow.md#dw-step; case WF-08): unknown keys, non-``dict`` policies (also ``dict``
subclasses), ``bool`` or ``float`` where an integer is required (``2.0`` too), out-of-range values.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, TypedDict

from takohost.domain import identifiers

__all__ = [
    "DEFAULT_POLICY",
    "MAX_ATTEMPTS",
    "MAX_DELAY_SECONDS",
    "RetryPolicy",
    "RetryPolicyJSON",
    "delay_after_attempt",
    "parse_retry_policy",
    "retry_delays",
]

MAX_ATTEMPTS = 100
MAX_DELAY_SECONDS = 43200
BACKOFFS = ("constant", "exponential")

Backoff = Literal["constant", "exponential"]


class RetryPolicyJSON(TypedDict):
    """The stored/wire shape: all four keys, camelCase as in docs/spec/durable-workflow.md#dw-step-do."""

    maxAttempts: int
    initialDelaySeconds: int
    backoff: Backoff
    maxDelaySeconds: int


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """A validated policy. ``max_attempts`` counts attempts (not retries), 1..100; delays are
    whole seconds 0..43200; ``backoff`` is ``"constant"`` or ``"exponential"``."""

    max_attempts: int
    initial_delay_seconds: int
    backoff: Backoff
    max_delay_seconds: int

    def to_json(self) -> RetryPolicyJSON:
        """The policy with all four keys of docs/spec/durable-workflow.md#dw-step-do, e.g. for the step's stored ``config``."""
        return {
            "maxAttempts": self.max_attempts,
            "initialDelaySeconds": self.initial_delay_seconds,
            "backoff": self.backoff,
            "maxDelaySeconds": self.max_delay_seconds,
        }

    @classmethod
    def from_json(cls, data: object) -> RetryPolicy:
        """Inverse of ``to_json`` (validates like ``parse_retry_policy``; ``TypeError`` if bad)."""
        if data is None:
            raise TypeError("a stored retry policy must be a dict, not None")
        return parse_retry_policy(data)


DEFAULT_POLICY = RetryPolicy(
    max_attempts=1, initial_delay_seconds=0, backoff="constant", max_delay_seconds=MAX_DELAY_SECONDS
)

_KEYS = ("maxAttempts", "initialDelaySeconds", "backoff", "maxDelaySeconds")


def parse_retry_policy(value: object) -> RetryPolicy:
    """Validate the ``retry_policy`` argument of ``step.do`` (``None`` → ``DEFAULT_POLICY``).

    ``value`` is ``None`` or an exact ``dict`` with ``maxAttempts`` (int 1..100, required) and
    optionally ``initialDelaySeconds`` (int 0..43200, default 0), ``backoff`` (``"constant"``
    default, or ``"exponential"``) and ``maxDelaySeconds`` (int 0..43200, default 43200).
    Raises ``TypeError`` with a message naming the offending key otherwise.
    """
    if value is None:
        return DEFAULT_POLICY
    if type(value) is not dict:
        raise TypeError(f"retry policy must be a dict or None, not {type(value).__name__}")
    # Check the keys' types before any lookup: a foreign key object's __eq__ is never called.
    for key in list(value):
        if type(key) is not str or key not in _KEYS:
            shown = repr(key) if type(key) is str else f"a {type(key).__name__} key"
            raise TypeError(f"retry policy has unknown key {shown}; allowed: {', '.join(_KEYS)}")
    if "maxAttempts" not in value:
        raise TypeError("retry policy needs maxAttempts (an integer 1..100)")
    max_attempts = identifiers.validate_int_in_range(
        value["maxAttempts"], what="retry policy maxAttempts", low=1, high=MAX_ATTEMPTS
    )
    initial = identifiers.validate_int_in_range(
        value.get("initialDelaySeconds", 0),
        what="retry policy initialDelaySeconds",
        low=0,
        high=MAX_DELAY_SECONDS,
    )
    maximum = identifiers.validate_int_in_range(
        value.get("maxDelaySeconds", MAX_DELAY_SECONDS),
        what="retry policy maxDelaySeconds",
        low=0,
        high=MAX_DELAY_SECONDS,
    )
    backoff = value.get("backoff", "constant")
    if type(backoff) is not str or backoff not in BACKOFFS:
        raise TypeError('retry policy backoff must be "constant" or "exponential"')
    return RetryPolicy(
        max_attempts=max_attempts,
        initial_delay_seconds=initial,
        backoff=backoff,  # type: ignore[arg-type]
        max_delay_seconds=maximum,
    )


def delay_after_attempt(policy: RetryPolicy, *, attempt: int) -> int:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next attempt.

    constant: ``min(maxDelaySeconds, initialDelaySeconds)``; exponential:
    ``min(maxDelaySeconds, initialDelaySeconds * 2**(attempt-1))`` (docs/spec/durable-workflow.md#dw-step-do "• do:"). Exact
    integer arithmetic, so any attempt number is fine. Whether there *is* a next attempt is the
    caller's question (``attempt < policy.max_attempts``). ``ValueError`` if ``attempt`` < 1.
    """
    if type(attempt) is not int or attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt!r}")
    if policy.backoff == "constant" or policy.initial_delay_seconds == 0:
        return min(policy.max_delay_seconds, policy.initial_delay_seconds)
    # Doubling beyond the cap changes nothing; stop early so huge attempt numbers stay cheap.
    delay = policy.initial_delay_seconds
    for _ in range(attempt - 1):
        if delay >= policy.max_delay_seconds:
            break
        delay *= 2
    return min(policy.max_delay_seconds, delay)


def retry_delays(policy: RetryPolicy) -> list[int]:
    """The delays after attempts 1 .. max_attempts-1 (no delay follows the last attempt)."""
    return [delay_after_attempt(policy, attempt=k) for k in range(1, policy.max_attempts)]
