"""``takohost.domain.deepjson``: JSON text of any depth, equal to the stdlib's where both work
(docs/spec/host-features.md#hf-newcomer)."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from takohost.domain import deepjson, jsonstrict

keys = st.text(max_size=6)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=30,
)


def _parse_iteratively(text: str):
    return deepjson._Parser(
        text, pairs_hook=dict, parse_float=float, parse_constant=deepjson._CONSTANTS.__getitem__
    ).parse()


@given(values)
def test_the_iterative_paths_equal_the_stdlib(value) -> None:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert deepjson._dumps_iterative(value, ensure_ascii=False) == text
    assert deepjson._dumps_iterative(value, ensure_ascii=True) == json.dumps(value, separators=(",", ":"))
    assert _parse_iteratively(text) == value
    spaced = json.dumps(value, indent=2)
    assert _parse_iteratively(spaced) == value


@pytest.mark.parametrize(
    "text", ["", "[", "[1,]", '{"a" 1}', '{"a":1,}', "[1 2]", "tru", '"\\x"', "[1]x", '{1:2}', "01", '"\x01"']
)
def test_the_iterative_parser_refuses_what_the_stdlib_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        _parse_iteratively(text)


@pytest.mark.parametrize("depth", [sys.getrecursionlimit() + 10, 10_000, 300_000])
def test_any_depth_round_trips(depth: int) -> None:
    text = '{"k":' * depth + '[1,2.5,"\\u00e9\\n",true,null,{}]' + "}" * depth
    value = deepjson.loads(text)
    assert deepjson.dumps(value) == text.replace("\\u00e9", "é")
    stored = deepjson.dumps_stored(value)
    assert json.loads(stored).startswith(deepjson.DEEP_MARKER)  # one JSON string for Postgres
    assert deepjson.dumps(deepjson.loads_stored(stored)) == deepjson.dumps(value)


def test_shallow_values_are_stored_as_plain_json() -> None:
    assert deepjson.dumps_stored({"a": [1]}) == '{"a":[1]}'
    assert deepjson.loads_stored('{"a":[1]}') == {"a": [1]}


def test_strict_parsing_keeps_its_rules_and_codes_at_any_depth() -> None:
    """Before: nesting beyond the recursion limit was ``invalid_json`` "too deep" whatever it held."""
    depth = 5_000
    good = ("[" * depth + '{"a": 1}' + "]" * depth).encode()
    assert jsonstrict.loads_strict(good) is not None
    for leaf, needle in (
        ('{"a": 1, "a": 2}', "duplicate object key"),
        ("NaN", "NaN is not a JSON value"),
        ("1e400", "out of the range of a double"),
        ('"\\ud800"', "lone surrogate"),
        ("1 2", "Expecting ',' delimiter"),
    ):
        with pytest.raises(jsonstrict.StrictJSONError, match=needle):
            jsonstrict.loads_strict(("[" * depth + leaf + "]" * depth).encode())


def test_dumps_refuses_non_json_at_any_depth() -> None:
    deep: list = [float("nan")]
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(ValueError):
        deepjson.dumps(deep)
    deep = [object()]
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(TypeError):
        deepjson.dumps(deep)
