"""Strict JSON for HTTP bodies (docs/spec/http-api.md API-json; cases DOC-06, DOC-07, DOC-08)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from takohost.domain.jsonstrict import StrictJSONError, loads_strict


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a":1,"b":[true,false,null],"c":"x"}', {"a": 1, "b": [True, False, None], "c": "x"}),
        (b' \t\r\n{"n": -0.5e1} \n', {"n": -5.0}),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b"[]", []),
        (b"12345678901234567890", 12345678901234567890),  # stays int; documents reject it later
        (b"1e-400", 0.0),  # underflow is a finite number
        ('{"é":"ü"}'.encode(), {"é": "ü"}),
        (b'{"a":{"a":1},"b":{"a":2}}', {"a": {"a": 1}, "b": {"a": 2}}),  # same key in sibling objects
    ],
)
def test_accepts_plain_json(raw: bytes, expected: object) -> None:
    value = loads_strict(raw)
    assert value == expected
    assert type(value) is type(expected)


def test_integers_stay_int_and_decimals_are_float() -> None:
    value = loads_strict(b'{"i":3,"f":3.0}')
    assert type(value["i"]) is int  # type: ignore[index]
    assert type(value["f"]) is float  # type: ignore[index]


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"NaN", id="NaN"),
        pytest.param(b'{"a":[1,Infinity]}', id="Infinity"),
        pytest.param(b"-Infinity", id="-Infinity"),
        pytest.param(b"1e400", id="overflow"),
        pytest.param(b"[-1.5e999]", id="negative-overflow"),
        pytest.param(b'{"a":1,"a":1}', id="duplicate-equal-values"),
        pytest.param(b'[{"x":{"k":1,"k":2}}]', id="duplicate-nested"),
        pytest.param(b'{"\\u0061":1,"a":2}', id="duplicate-after-unescaping"),
        pytest.param(b'"\\ud800"', id="lone-high-surrogate"),
        pytest.param(b'["\\udc00"]', id="lone-low-surrogate-in-list"),
        pytest.param(b'{"\\udbff":1}', id="lone-surrogate-key"),
        pytest.param(b'{"k":"\\ude00\\ud83d"}', id="reversed-pair"),
        pytest.param(b"\xef\xbb\xbf{}", id="utf8-bom"),
        pytest.param(b'{"a":"\xff"}', id="invalid-utf8"),
        pytest.param(b'{"a":"\xed\xa0\x80"}', id="cesu-encoded-surrogate"),
        pytest.param("{}".encode("utf-16"), id="utf16"),
        pytest.param(b"{} {}", id="trailing-garbage"),
        pytest.param(b"{}x", id="trailing-char"),
        pytest.param(b"", id="empty"),
        pytest.param(b"   ", id="whitespace-only"),
        pytest.param(b'{"a":1,}', id="trailing-comma"),
        pytest.param(b"{'a':1}", id="single-quotes"),
        pytest.param(b'"a\tb"', id="raw-control-character"),
        pytest.param(b"01", id="leading-zero"),
        pytest.param(b"+1", id="plus-sign"),
        pytest.param(b".5", id="bare-fraction"),
        pytest.param(b"\xc2\xa0{}", id="nbsp-whitespace"),
        pytest.param(b"1" * 5000, id="int-beyond-digit-limit"),
        pytest.param(b"[" * 100_000 + b"]" * 99_999, id="deep-nesting-unclosed"),
    ],
)
def test_rejects(raw: bytes) -> None:
    with pytest.raises(StrictJSONError) as error:
        loads_strict(raw)
    assert error.value.message
    assert isinstance(error.value, ValueError)


def test_rejects_non_bytes() -> None:
    with pytest.raises(TypeError):
        loads_strict('{"a":1}')  # type: ignore[arg-type]


def test_bytearray_is_fine() -> None:
    assert loads_strict(bytearray(b'{"a":1}')) == {"a": 1}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(json_values, st.booleans())
def test_round_trips_whatever_json_dumps_writes(value: object, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    assert loads_strict(raw) == value


def test_any_depth_is_parsed() -> None:
    """docs/spec/host-features.md#hf-newcomer: nesting is no fault (docs/spec/host-limits.md#hl-decisions); before, 990+ levels were invalid_json."""
    value = loads_strict(b"[" * 100_000 + b"]" * 100_000)
    for _ in range(99_999):
        value = value[0]
    assert value == []
