"""Ids, names, step arguments (docs/spec/durable-workflow.md#dw-resource, docs/spec/http-api.md#api-res, docs/spec/worker-forms.md#wf-version, docs/spec/durable-workflow.md#dw-step, docs/spec/host-limits.md#hl-decisions; case WF-24)."""

from __future__ import annotations

import pytest

from takohost.domain import identifiers
from takohost.domain.identifiers import (
    validate_scalar_string,
    validate_sleep_seconds,
    validate_timeout_seconds,
    validate_wait_options,
)


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "order-42",
        "x" * 256,
        "\U0001f600" * 256,  # 256 scalar values, 512 UTF-16 units
        "a/b%c?d e",
        "\u0000",
        "\ufffd",
        "\U0010ffff",
    ],
)
def test_scalar_strings_accepted(value: str) -> None:
    assert validate_scalar_string(value, what="instance id") is value


class StrSub(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x" * 257,
        "\U0001f600" * 257,
        "\ud800",
        "ok\udfff",
        "\ud83d\ude00",  # a surrogate pair spelled as two code points is not a scalar value
        None,
        1,
        b"id",
        ["id"],
        StrSub("id"),
    ],
)
def test_scalar_strings_rejected(value: object) -> None:
    with pytest.raises(TypeError, match="step name"):
        validate_scalar_string(value, what="step name")


def test_WF_24_sleep_seconds() -> None:
    assert validate_sleep_seconds(0) == 0
    assert validate_sleep_seconds(31536000) == 31536000
    for bad in (-1, 1.5, True, 31536001, 1.0, None, "5"):
        with pytest.raises(TypeError):
            validate_sleep_seconds(bad)


def test_WF_24_timeout_seconds() -> None:
    assert validate_timeout_seconds(1) == 1
    assert validate_timeout_seconds(31536000) == 31536000
    for bad in (0, -1, 31536001, 2.0, False, True, None):
        with pytest.raises(TypeError):
            validate_timeout_seconds(bad)


def test_WF_24_wait_options() -> None:
    assert validate_wait_options({"type": "approved", "timeoutSeconds": 86400}) == ("approved", 86400)
    assert validate_wait_options({"timeoutSeconds": 1, "type": "\U0001f600" * 256}) == ("\U0001f600" * 256, 1)
    for bad in (
        {"type": "t", "timeoutSeconds": 0},
        {"type": "t"},
        {"timeoutSeconds": 5},
        {"type": "", "timeoutSeconds": 5},
        {"type": "t", "timeoutSeconds": 5, "payload": None},
        {"type": "t" * 257, "timeoutSeconds": 5},
        {"type": None, "timeoutSeconds": 5},
        {"type": "t", "timeoutSeconds": 5.0},
        {"type": "t", "timeout": 5},
        {1: "t", "timeoutSeconds": 5},
        None,
        ("t", 5),
    ):
        with pytest.raises(TypeError):
            validate_wait_options(bad)


@pytest.mark.parametrize(
    ("regex", "good", "bad"),
    [
        (
            identifiers.RESOURCE_NAME_RE,
            ["a", "0", "my-worker", "a" * 63, "a-b-c9"],
            ["", "-a", "a-", "A", "a_b", "a" * 64, "a\n", "é", "a b"],
        ),
        (
            identifiers.CLASS_NAME_RE,
            ["ReportWorkflow", "_x", "$a", "A$b", "a" * 64],
            ["", "1A", "a-b", "a" * 65, "Report\n", "Ré"],
        ),
        (
            identifiers.VAR_NAME_RE,
            ["CURRENCY", "_", "ORDERS_2", "A1"],
            ["", "currency", "1A", "A-B", "ORDERS\n", "Ä"],
        ),
        (
            identifiers.MODULE_NAME_RE,
            ["main.py", "_x.py", "pkg/mod.py", "pkg/sub/m2.py", "pkg/__init__.py"],
            [
                "",
                "main",
                "main.pyc",
                "1main.py",
                "pkg//m.py",
                "/m.py",
                "pkg/1x/m.py",
                "m.py\n",
                "../m.py",
                "a-b.py",
                "pkg/.py",
            ],
        ),
    ],
)
def test_name_regexes(regex, good: list[str], bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    for name in good:
        assert regex.match(name), name
        assert regex.fullmatch(name), name
    for name in bad:
        assert regex.match(name) is None, name
        assert regex.fullmatch(name) is None, name


def test_int_in_range_rejects_bool_and_float() -> None:
    assert identifiers.validate_int_in_range(5, what="x", low=0, high=5) == 5
    for bad in (True, 5.0, 6, -1):
        with pytest.raises(TypeError, match="x"):
            identifiers.validate_int_in_range(bad, what="x", low=0, high=5)
