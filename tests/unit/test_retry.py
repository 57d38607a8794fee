"""Retry policies and delays (docs/spec/durable-workflow.md#dw-step-do "• do:", docs/spec/durable-workflow.md#dw-step; cases WF-05, WF-06, WF-08)."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from takohost.domain import retry
from takohost.domain.retry import (
    DEFAULT_POLICY,
    RetryPolicy,
    delay_after_attempt,
    parse_retry_policy,
    retry_delays,
)


def test_omitted_policy_is_one_attempt() -> None:
    assert parse_retry_policy(None) == DEFAULT_POLICY
    assert DEFAULT_POLICY == RetryPolicy(
        max_attempts=1, initial_delay_seconds=0, backoff="constant", max_delay_seconds=43200
    )
    assert retry_delays(DEFAULT_POLICY) == []


def test_defaults_inside_a_given_policy() -> None:
    assert parse_retry_policy({"maxAttempts": 3}) == RetryPolicy(
        max_attempts=3, initial_delay_seconds=0, backoff="constant", max_delay_seconds=43200
    )


def test_WF_05_exponential_delays_10_then_20() -> None:
    policy = parse_retry_policy({"maxAttempts": 3, "initialDelaySeconds": 10, "backoff": "exponential"})
    assert retry_delays(policy) == [10, 20]  # not 20, 40 (off-by-one doubling)
    assert delay_after_attempt(policy, attempt=1) == 10


def test_WF_06_constant_is_capped_by_max_delay() -> None:
    policy = parse_retry_policy({"maxAttempts": 4, "initialDelaySeconds": 100, "maxDelaySeconds": 30})
    assert policy.backoff == "constant"
    assert retry_delays(policy) == [30, 30, 30]


def test_WF_06_exponential_is_capped_by_the_default_max_delay() -> None:
    policy = parse_retry_policy({"maxAttempts": 5, "initialDelaySeconds": 20000, "backoff": "exponential"})
    assert policy.max_delay_seconds == 43200
    assert retry_delays(policy) == [20000, 40000, 43200, 43200]


@pytest.mark.parametrize(
    "policy",
    [
        {"maxAttempts": 0},
        {"maxAttempts": 101},
        {"maxAttempts": 3, "initialDelaySeconds": 43201},
        {"maxAttempts": 3, "backoff": "linear"},
        {"maxAttempts": 3, "initialDelaySeconds": 1.5},
        {"maxAttempts": True},
        {"retries": {"limit": 3}},
        {"maxAttempts": 2, "maxDelaySeconds": -1},
    ],
)
def test_WF_08_bad_policies_are_type_errors(policy: dict) -> None:
    with pytest.raises(TypeError):
        parse_retry_policy(policy)


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param({"maxAttempts": 2.0}, id="integral-float"),
        pytest.param({"maxAttempts": 2, "initialDelaySeconds": False}, id="bool-delay"),
        pytest.param({"maxAttempts": 2, "maxDelaySeconds": 43201}, id="max-delay-too-big"),
        pytest.param({"maxAttempts": 2, "initialDelaySeconds": -1}, id="negative-initial"),
        pytest.param({"maxAttempts": 2, "backoff": None}, id="null-backoff"),
        pytest.param({"maxAttempts": 2, "backoff": "Exponential"}, id="backoff-case"),
        pytest.param({"maxAttempts": None}, id="null-max-attempts"),
        pytest.param({"maxAttempts": "3"}, id="string-max-attempts"),
        pytest.param({"backoff": "exponential"}, id="max-attempts-missing"),
        pytest.param({}, id="empty"),
        pytest.param({"maxAttempts": 2, 1: 2}, id="non-str-key"),
        pytest.param({"maxAttempts": 2, "max_attempts": 2}, id="snake-case-key"),
        pytest.param(collections.OrderedDict(maxAttempts=2), id="dict-subclass"),
        pytest.param([("maxAttempts", 2)], id="list"),
        pytest.param(3, id="int"),
    ],
)
def test_other_bad_policies_are_type_errors(policy: object) -> None:
    with pytest.raises(TypeError):
        parse_retry_policy(policy)


def test_boundaries_are_accepted() -> None:
    policy = parse_retry_policy(
        {"maxAttempts": 100, "initialDelaySeconds": 43200, "backoff": "exponential", "maxDelaySeconds": 0}
    )
    assert policy.max_attempts == 100
    assert retry_delays(policy) == [0] * 99
    assert parse_retry_policy({"maxAttempts": 1, "initialDelaySeconds": 0}).max_attempts == 1


def test_json_round_trip_uses_the_seed_names() -> None:
    policy = parse_retry_policy({"maxAttempts": 5, "backoff": "exponential", "initialDelaySeconds": 2})
    stored = policy.to_json()
    assert stored == {
        "maxAttempts": 5,
        "initialDelaySeconds": 2,
        "backoff": "exponential",
        "maxDelaySeconds": 43200,
    }
    assert RetryPolicy.from_json(stored) == policy
    with pytest.raises(TypeError):
        RetryPolicy.from_json(None)


def test_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        DEFAULT_POLICY.max_attempts = 5  # type: ignore[misc]


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError):
        delay_after_attempt(DEFAULT_POLICY, attempt=0)


@given(
    max_attempts=st.integers(1, retry.MAX_ATTEMPTS),
    initial=st.integers(0, retry.MAX_DELAY_SECONDS),
    maximum=st.integers(0, retry.MAX_DELAY_SECONDS),
    backoff=st.sampled_from(["constant", "exponential"]),
)
def test_delays_match_the_seed_formula(max_attempts: int, initial: int, maximum: int, backoff: str) -> None:
    policy = parse_retry_policy(
        {
            "maxAttempts": max_attempts,
            "initialDelaySeconds": initial,
            "backoff": backoff,
            "maxDelaySeconds": maximum,
        }
    )
    delays = retry_delays(policy)
    assert len(delays) == max_attempts - 1
    for k, delay in enumerate(delays, start=1):
        factor = 2 ** (k - 1) if backoff == "exponential" else 1
        assert delay == min(maximum, initial * factor)
        assert 0 <= delay <= retry.MAX_DELAY_SECONDS
    assert delays == sorted(delays)  # never shrinks
    assert delay_after_attempt(policy, attempt=10**6) <= maximum  # huge attempt numbers stay cheap
