"""Document rules (docs/spec/durable-workflow.md#dw-doc DW-doc): properties and the edges the field cases point at."""

from __future__ import annotations

import collections
import decimal
import enum
import json
import math
import pickle
import struct
import sys
import time

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from takohost.domain import documents
from takohost.domain.documents import DocumentTooLargeError, InvalidDocument, canonical_document

# --- strategies -------------------------------------------------------------------------------

# st.text() never generates surrogates (category Cs is excluded by default).
keys = st.text(max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=25,
)
documents_ = st.dictionaries(keys, values, max_size=6)


def canon(value: object) -> bytes:
    result = canonical_document(value, allow_none=False)
    assert result is not None
    return result


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(documents_)
def test_valid_documents_serialize_as_rfc8785_and_parse_back_equal(doc: dict) -> None:
    result = canon(doc)
    assert result == rfc8785.dumps(doc)  # the package is the oracle on plain values
    # JSON numbers are doubles: an integral float beyond 2**53 comes back as its shortest digits.
    assert json.loads(result, parse_int=float) == _numbers_as_floats(doc)
    assert len(result) <= documents.MAX_DOCUMENT_BYTES


def _numbers_as_floats(value: object) -> object:
    if type(value) is dict:
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    if type(value) is list:
        return [_numbers_as_floats(v) for v in value]
    if type(value) in (int, float):
        return float(value)  # type: ignore[arg-type]
    return value


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=0, max_size=4), st.integers(0, 9), max_size=12))
def test_members_are_sorted_by_utf16_code_units(doc: dict) -> None:
    pairs = json.loads(canon(doc), object_pairs_hook=lambda p: p)
    names = [name for name, _ in pairs]
    assert names == sorted(doc, key=lambda k: k.encode("utf-16-be"))


def _ecmascript_number(value: float) -> str:
    """An independent rendering of ECMA-262 Number::toString from repr's shortest digits."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + _ecmascript_number(-value)
    sign, digit_tuple, exponent = decimal.Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # type: ignore[operator]
    digits = digits.lstrip("0")
    k, n = len(digits), len(digits) + exponent  # value = 0.digits × 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_follow_ecmascript_number_to_string(value: float) -> None:
    assert canon({"f": value}) == b'{"f":' + _ecmascript_number(value).encode() + b"}"


@pytest.mark.parametrize(
    ("bits", "text"),
    [  # RFC 8785 Appendix B style samples, cross-checked with Node 20 JSON.stringify
        ("0000000000000001", "5e-324"),
        ("8000000000000000", "0"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("44b52d02c7e14af6", "1e+23"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("c3c0000000000001", "-2305843009213694500"),
    ],
)
def test_number_samples(bits: str, text: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert canon({"n": value}) == b'{"n":' + text.encode() + b"}"


class _Bad(enum.Enum):
    TUPLE = (1, 2)


def _bad_values() -> list[tuple[str, object]]:
    class StrSub(str):
        pass

    class IntSub(int):
        pass

    class FloatSub(float):
        pass

    class DictSub(dict):
        pass

    class ListSub(list):
        pass

    return [
        ("tuple", (1, 2)),
        ("set", {1}),
        ("frozenset", frozenset()),
        ("bytes", b"x"),
        ("bytearray", bytearray(b"x")),
        ("complex", 1j),
        ("decimal", decimal.Decimal("1.5")),
        ("nan", float("nan")),
        ("inf", float("inf")),
        ("-inf", float("-inf")),
        ("int 2**53", 2**53),
        ("int -(2**53)", -(2**53)),
        ("lone surrogate", "a\udfffb"),
        ("python surrogate pair", "\ud83d\ude00"),
        ("str subclass", StrSub("x")),
        ("int subclass", IntSub(1)),
        ("float subclass", FloatSub(1.0)),
        ("dict subclass", DictSub()),
        ("list subclass", ListSub()),
        ("OrderedDict", collections.OrderedDict()),
        ("enum", _Bad.TUPLE),
        ("object", object()),
        ("function", len),
        ("type", dict),
    ]


BAD_VALUES = _bad_values()


@settings(max_examples=200, deadline=None)
@given(documents_, st.sampled_from(BAD_VALUES), st.data())
def test_one_bad_value_anywhere_is_rejected_with_its_pointer(
    doc: dict, bad: tuple, data: st.DataObject
) -> None:
    _, bad_value = bad
    container: dict | list = doc
    pointer = ""
    while True:
        inner = [
            (token, child)
            for token, child in (container.items() if type(container) is dict else enumerate(container))
            if type(child) in (dict, list)
        ]
        if not inner or data.draw(st.booleans()):
            break
        token, container = data.draw(st.sampled_from(inner))
        pointer += "/" + str(token).replace("~", "~0").replace("/", "~1")
    if type(container) is dict:
        container["x/~y"] = bad_value
        pointer += "/x~1~0y"
    else:
        pointer += f"/{len(container)}"
        container.append(bad_value)
    with pytest.raises(InvalidDocument) as error:
        canon(doc)
    assert error.value.pointer == pointer


@settings(max_examples=100, deadline=None)
@given(documents_, st.sampled_from([1, 2.5, None, True, ("t",), b"k", "\ud800"]))
def test_a_bad_key_anywhere_is_rejected(doc: dict, bad_key: object) -> None:
    doc["nested"] = {"ok": 1, bad_key: 2}
    with pytest.raises(InvalidDocument) as error:
        canon(doc)
    assert error.value.pointer == "/nested"


# --- nothing user-defined runs ----------------------------------------------------------------


class Trap:
    """Every hook a serializer might call records the call."""

    calls: list[str] = []

    def __json__(self) -> object:
        Trap.calls.append("__json__")
        return {}

    def __iter__(self):  # type: ignore[no-untyped-def]
        Trap.calls.append("__iter__")
        return iter(())

    def __hash__(self) -> int:
        Trap.calls.append("__hash__")
        return 0

    def __eq__(self, other: object) -> bool:
        Trap.calls.append("__eq__")
        return True

    def __repr__(self) -> str:
        Trap.calls.append("__repr__")
        return "Trap"

    def __str__(self) -> str:
        Trap.calls.append("__str__")
        return "Trap"

    def __float__(self) -> float:
        Trap.calls.append("__float__")
        return 1.0

    def __index__(self) -> int:
        Trap.calls.append("__index__")
        return 1

    @property
    def value(self) -> int:
        Trap.calls.append("value")
        return 1


class TrapMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        Trap.calls.append("metaclass __name__")
        return "x"


class TrapWithMeta(metaclass=TrapMeta):
    pass


class TrapDict(dict):
    def items(self):  # type: ignore[no-untyped-def]
        Trap.calls.append("items")
        return super().items()

    def keys(self):  # type: ignore[no-untyped-def]
        Trap.calls.append("keys")
        return super().keys()


@pytest.mark.parametrize(
    "doc",
    [
        {"a": Trap()},
        {Trap(): 1},
        {"a": [1, {"b": Trap()}]},
        {"a": TrapWithMeta()},
        {"a": TrapDict(x=1)},
        TrapDict(x=1),
    ],
    ids=["value", "key", "nested", "metaclass", "dict-subclass", "dict-subclass-root"],
)
def test_no_user_code_is_called(doc: object) -> None:
    Trap.calls.clear()
    with pytest.raises(InvalidDocument):
        canonical_document(doc, allow_none=True)
    assert Trap.calls == []


# --- structure --------------------------------------------------------------------------------


def _nested(depth: int) -> dict:
    """A document whose containers nest ``depth`` levels (the root is level 1)."""
    doc: dict = {}
    current: dict | list = doc
    for level in range(2, depth + 1):
        child: dict | list = [] if level % 2 else {}
        if type(current) is dict:
            current["k"] = child
        else:
            current.append(child)
        current = child
    return doc


def test_no_depth_limit_and_never_a_recursion_error() -> None:
    """docs/spec/host-features.md#hf-newcomer / docs/spec/host-limits.md#hl-decisions: the Form sets no depth limit (docs/spec/durable-workflow.md#dw-doc), so none is added."""
    for depth in (512, 513, 1_000, 10_000, 200_000):
        deepest = canon(_nested(depth))
        assert deepest.count(b"[") + deepest.count(b"{") == depth


def test_a_depth_limit_only_where_asked_for_vars() -> None:
    limit = documents.VARS_MAX_DEPTH
    deepest = canonical_document(_nested(limit), allow_none=False, max_depth=limit)
    assert deepest.count(b"[") + deepest.count(b"{") == limit
    with pytest.raises(InvalidDocument, match="nesting"):
        canonical_document(_nested(limit + 1), allow_none=False, max_depth=limit)


def test_works_with_an_almost_exhausted_stack() -> None:
    # The walk is iterative: a caller deep in its own recursion can still validate deep documents.
    doc = _nested(10_000)
    limit = sys.getrecursionlimit()

    def recurse(n: int) -> bytes:
        return canon(doc) if n == 0 else recurse(n - 1)

    assert recurse(limit - 100).startswith(b'{"k":{"k":[{"k":')


def test_shared_sub_object_depth_counts_where_it_reappears() -> None:
    chain = _nested(300)
    assert canon({"a": chain, "b": [chain]})
    wrapped: list = [chain]
    for _ in range(250):
        wrapped = [wrapped]
    assert canon({"a": chain, "b": wrapped})
    with pytest.raises(InvalidDocument, match="nesting"):
        canonical_document({"a": chain, "b": wrapped}, allow_none=False, max_depth=512)


def test_shared_objects_count_every_occurrence_and_blowup_stops_early() -> None:
    shared: list = [1]
    for _ in range(40):  # 2**40 leaves if expanded
        shared = [shared, shared]
    started = time.monotonic()
    with pytest.raises(DocumentTooLargeError) as error:
        canon({"x": shared})
    assert time.monotonic() - started < 5
    assert not error.value.exact
    assert error.value.size > documents.MAX_DOCUMENT_BYTES


def test_cycle_through_a_list_is_invalid() -> None:
    loop: list = []
    doc = {"a": [{"b": loop}]}
    loop.append(doc)
    with pytest.raises(InvalidDocument, match="cycle") as error:
        canon(doc)
    assert error.value.pointer == "/a/0/b/0"


def test_huge_string_is_too_large_without_serializing_it() -> None:
    with pytest.raises(DocumentTooLargeError) as error:
        canon({"s": "a" * (5 * 2**20)})
    assert error.value.size >= 5 * 2**20


def test_invalid_wins_over_too_large() -> None:
    with pytest.raises(InvalidDocument):
        canon({"big": "a" * 2_000_000, "z": float("nan")})


def test_size_counts_utf8_bytes_and_escapes() -> None:
    result = canon({"e": "😀é\t"})
    assert result == '{"e":"😀é\\t"}'.encode()
    assert len(result) == 5 + 1 + 4 + 2 + 2 + 1 + 1


def test_rfc8785_key_sorting_example() -> None:
    doc = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    names = [name for name, _ in json.loads(canon(doc), object_pairs_hook=lambda p: p)]
    assert names == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_booleans_are_booleans_not_integers() -> None:
    assert canon({"t": True, "f": False, "n": None, "i": 0}) == b'{"f":false,"i":0,"n":null,"t":true}'


def test_none_root() -> None:
    assert canonical_document(None, allow_none=True) is None
    with pytest.raises(InvalidDocument) as error:
        canonical_document(None, allow_none=False)
    assert error.value.pointer == ""


def test_empty_containers() -> None:
    assert canon({}) == b"{}"
    assert canon({"a": [], "b": {}}) == b'{"a":[],"b":{}}'


def test_exceptions_pickle_and_describe_themselves() -> None:
    invalid = pickle.loads(pickle.dumps(InvalidDocument("/a/3", "a tuple")))
    assert (invalid.pointer, invalid.message) == ("/a/3", "a tuple")
    assert "/a/3" in str(invalid)
    too_large = pickle.loads(pickle.dumps(DocumentTooLargeError(1048577)))
    assert (too_large.size, too_large.exact) == (1048577, True)
    assert "1048577" in str(too_large)
    assert isinstance(invalid, ValueError) and isinstance(too_large, ValueError)


def test_non_finite_message_does_not_need_the_value_repr() -> None:
    with pytest.raises(InvalidDocument) as error:
        canon({"a": math.inf})
    assert error.value.pointer == "/a"
