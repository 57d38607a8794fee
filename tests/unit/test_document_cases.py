"""Field cases of area ``document`` (cases.json DOC-xx), docs/spec/durable-workflow.md#dw-doc and API-json.

"python" channel: ``canonical_document`` on the Python value (what a binding's params, an event
payload, a step result or an output go through). "http" channel: ``loads_strict`` on the body,
then ``canonical_document`` on its ``params``.
"""

from __future__ import annotations

import collections
import json

import pytest
import rfc8785

from takohost.domain import documents, jsonstrict


def canon(value: object) -> bytes:
    result = documents.canonical_document(value, allow_none=False)
    assert result is not None
    return result


def http_params(body: bytes) -> bytes | None:
    parsed = jsonstrict.loads_strict(body)
    assert type(parsed) is dict
    return documents.canonical_document(parsed["params"], allow_none=False)


def assert_canonical(value: object, *, text: str, size: int) -> None:
    result = canon(value)
    assert result == text.encode("utf-8")
    assert len(result) == size


def test_DOC_01_exponent_form_from_1e21() -> None:
    assert_canonical({"a": 1e21}, text='{"a":1e+21}', size=11)


def test_DOC_02_1e20_written_in_full_not_measured_with_json_dumps() -> None:
    value = {"a": 1e20}
    assert_canonical(value, text='{"a":100000000000000000000}', size=27)
    assert len(json.dumps(value, separators=(",", ":"))) == 11  # the under-count the case warns of


def test_DOC_03_ecmascript_number_forms() -> None:
    value = {"n": -0.0, "i": 1.0, "x": 0.000001, "y": 1e-7, "z": 5e-324}
    assert_canonical(value, text='{"i":1,"n":0,"x":0.000001,"y":1e-7,"z":5e-324}', size=46)
    assert len(json.dumps(value, separators=(",", ":"))) == 49


@pytest.mark.parametrize("value", [{"k": "\ud800"}, {"\udc00": 1}, {"k": "a\udc00b\ud800"}])
def test_DOC_06_python_lone_surrogates_are_invalid_params(value: dict) -> None:
    with pytest.raises(documents.InvalidDocument):
        canon(value)


@pytest.mark.parametrize("body", [b'{"params":{"k":"\\ud800"}}', b'{"params":{"k":"\\udc00\\ud83d"}}'])
def test_DOC_06_http_lone_surrogate_escapes_are_invalid_json(body: bytes) -> None:
    with pytest.raises(jsonstrict.StrictJSONError):
        jsonstrict.loads_strict(body)


def test_DOC_06_control_escaped_pair_is_one_real_character() -> None:
    result = http_params(b'{"params":{"k":"\\ud83d\\ude00"}}')
    assert result == '{"k":"😀"}'.encode()
    assert len(result) == 12


@pytest.mark.parametrize("value", [{"a": float("nan")}, {"a": float("inf")}, {"a": [float("-inf")]}])
def test_DOC_07_python_non_finite_numbers_are_invalid_params(value: dict) -> None:
    with pytest.raises(documents.InvalidDocument):
        canon(value)


@pytest.mark.parametrize(
    "body",
    [
        b'{"params":{"a":NaN}}',
        b'{"params":{"a":Infinity}}',
        b'{"params":{"a":-Infinity}}',
        b'{"params":{"a":1e400}}',  # overflows to inf: refused by the parser, never stored or clamped
    ],
)
def test_DOC_07_http_non_finite_literals_are_invalid_json(body: bytes) -> None:
    with pytest.raises(jsonstrict.StrictJSONError):
        jsonstrict.loads_strict(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"params":{"qty":1,"qty":-1}}',
        b'{"type":"t","type":"u"}',  # as an event body
    ],
)
def test_DOC_08_duplicate_keys_are_invalid_json(body: bytes) -> None:
    with pytest.raises(jsonstrict.StrictJSONError):
        jsonstrict.loads_strict(body)


def test_DOC_09_size_limit_is_1048576_inclusive() -> None:
    accepted = canon({"p": "a" * 1048568})
    assert len(accepted) == 1048576 == documents.MAX_DOCUMENT_BYTES
    with pytest.raises(documents.DocumentTooLargeError) as too_large:
        canon({"p": "a" * 1048569})
    assert too_large.value.size == 1048577
    assert too_large.value.exact


def test_DOC_11_only_quote_backslash_and_c0_controls_are_escaped() -> None:
    result = canon({"s": '\u001f\u007f/\u2028"\\\n'})
    assert result.hex(" ") == "7b 22 73 22 3a 22 5c 75 30 30 31 66 7f 2f e2 80 a8 5c 22 5c 5c 5c 6e 22 7d"
    assert result == '{"s":"\\u001f\u007f/\u2028\\"\\\\\\n"}'.encode()
    assert len(result) == 25


@pytest.mark.parametrize("value", [[1, 2], "x", 5, collections.OrderedDict(a=1)])
def test_DOC_12_python_root_must_be_a_plain_dict(value: object) -> None:
    with pytest.raises(documents.InvalidDocument) as error:
        documents.canonical_document(value, allow_none=True)
    assert error.value.pointer == ""


@pytest.mark.parametrize("body", [b'{"params":[1,2]}', b'{"params":"x"}', b'{"params":null}'])
def test_DOC_12_http_params_must_be_an_object_and_null_is_not_none(body: bytes) -> None:
    with pytest.raises(documents.InvalidDocument):
        http_params(body)


def test_DOC_12_control_omitted_params_mean_none() -> None:
    assert documents.canonical_document(None, allow_none=True) is None


def test_DOC_12_the_rfc8785_package_alone_would_accept_an_ordered_dict() -> None:
    # Why we validate before serialising: the package takes the subclass silently.
    assert rfc8785.dumps(collections.OrderedDict(a=1)) == b'{"a":1}'


def test_DOC_13_1024_keys_accepted_1025_rejected_at_every_depth() -> None:
    assert len(canon({f"k{i:04d}": 0 for i in range(1024)})) == 10241
    with pytest.raises(documents.InvalidDocument) as root_error:
        canon({f"k{i:04d}": 0 for i in range(1025)})
    assert root_error.value.pointer == ""
    with pytest.raises(documents.InvalidDocument) as nested_error:
        canon({"inner": {f"k{i:04d}": 0 for i in range(2000)}})
    assert nested_error.value.pointer == "/inner"


@pytest.mark.parametrize("value", [{1: "a"}, {True: 1}, {None: 1}, {"a": {2.5: 1}}])
def test_DOC_14_only_str_keys(value: dict) -> None:
    with pytest.raises(documents.InvalidDocument):
        canon(value)


def test_DOC_15_cycle_is_invalid_shared_acyclic_is_fine() -> None:
    d: dict = {}
    d["self"] = d
    with pytest.raises(documents.InvalidDocument) as error:
        canon(d)
    assert error.value.pointer == "/self"
    x = {"k": 1}
    assert_canonical({"a": x, "b": x}, text='{"a":{"k":1},"b":{"k":1}}', size=25)


def test_DOC_17_integers_are_safe_integers_and_floats_keep_their_double_value() -> None:
    assert_canonical({"n": 2**53 - 1}, text='{"n":9007199254740991}', size=22)
    assert_canonical({"n": float(2**53)}, text='{"n":9007199254740992}', size=22)
    for too_big in (2**53, 2**68, -(2**53)):
        with pytest.raises(documents.InvalidDocument) as error:
            canon({"n": too_big})
        assert error.value.pointer == "/n"
    # The double 2**68 is written by its shortest ECMAScript form, not its exact digits.
    assert canon({"n": float(2**68)}) == b'{"n":295147905179352830000}'
