"""Unit tests of the sandbox wire protocol: framing, strict decoding, the parent's shape checks of
child messages, and the child's step request/answer logic against an in-memory channel."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from takohost import errors
from takohost.runtime import protocol, step

# -- framing -------------------------------------------------------------------------------------


def test_frame_round_trip_in_arbitrary_chunks():
    messages = [{"op": "ping"}, {"op": "resolve", "result": {"é": [1, 2.5, None, True, "\U0001f600"]}}]
    stream = b"".join(protocol.encode_frame(m) for m in messages)
    for chunk in (1, 3, 7, len(stream)):
        buffer = protocol.FrameBuffer()
        received = []
        for start in range(0, len(stream), chunk):
            received.extend(buffer.feed(stream[start : start + chunk]))
        assert received == messages
        assert buffer.pending == 0


def test_frame_header_is_big_endian_length_of_utf8_json():
    frame = protocol.encode_frame({"op": "x", "s": "é"})
    (length,) = struct.unpack(">I", frame[:4])
    assert frame[4:] == '{"op":"x","s":"é"}'.encode()
    assert length == len(frame) - 4


@pytest.mark.parametrize(
    "message",
    [
        {"op": "x", "v": float("nan")},
        {"op": "x", "v": float("inf")},
        {"op": "x", "v": object()},
        {"op": "x", "v": "\ud800"},
        {"op": "x", "v": "a" * (protocol.MAX_FRAME_BYTES + 1)},
    ],
)
def test_encode_rejects_what_is_not_a_frame(message: dict):
    with pytest.raises(protocol.ProtocolError):
        protocol.encode_frame(message)


@pytest.mark.parametrize(
    "body",
    [
        b'{"op": "x", "v": NaN}',
        b'{"op": "x", "op": "y"}',
        b'{"op": "x", "v": "\\ud800"}',
        b"[1, 2]",
        b'{"v": 1}',
        b'{"op": 3}',
        b"\xff",
    ],
)
def test_decode_is_strict(body: bytes):
    with pytest.raises(protocol.ProtocolError):
        protocol.FrameBuffer().feed(struct.pack(">I", len(body)) + body)


def test_oversized_length_is_rejected_before_the_body_arrives():
    with pytest.raises(protocol.ProtocolError):
        protocol.FrameBuffer().feed(struct.pack(">I", protocol.MAX_FRAME_BYTES + 1))


def test_safe_text_replaces_surrogates_and_truncates():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert protocol.safe_text("a\ud800b") == "a\ufffdb"
    assert len(protocol.safe_text("x" * 10_000)) == protocol.MAX_TEXT_CHARS
    assert protocol.safe_text(Unprintable()) == "<unprintable>"
    protocol.encode_frame({"op": "x", "m": protocol.safe_text("\udfff" * 5)})


# -- shape checks of child messages --------------------------------------------------------------

VALID = [
    {"op": "hello", "pid": 12, "protocol": 1},
    {"op": "do", "name": "a", "policy": {"maxAttempts": 1}},
    {"op": "do", "name": "a", "argsError": "bad"},
    {"op": "sleep", "name": "s", "seconds": 0},
    {"op": "wait", "name": "w", "type": "t", "timeoutSeconds": 5},
    {"op": "wait", "name": "w", "argsError": "bad"},
    {"op": "effect_result", "name": "a", "ok": True, "result": None},
    {"op": "effect_result", "name": "a", "ok": False, "error": {"type": "E", "message": "m"}},
    {"op": "binding", "binding": "ORDERS", "call": "create", "args": {}},
    {"op": "run_returned", "output": {"x": 1}},
    {"op": "run_failed", "reason": "step_failed", "message": "m", "phase": "run", "step": "a"},
    {"op": "mismatch", "message": "m"},
    {"op": "validated", "workflowClasses": ["A"], "handlers": ["scheduled"]},
    {"op": "import_error", "message": "SyntaxError: x"},
    {"op": "scheduled_done", "ok": True},
    {"op": "scheduled_done", "ok": False, "message": "m"},
    {"op": "scheduled_done", "ok": False, "message": "m", "traceback": [{"file": "main.py"}]},
    {"op": "log", "lines": [[1, "stdout", "a"], [2, "stderr", ""]], "dropped": 0},
    {"op": "log", "lines": [], "dropped": 3},
    {
        "op": "effect_result",
        "name": "a",
        "ok": False,
        "error": {"type": "E", "message": "m", "traceback": []},
    },
]

INVALID = [
    {"op": "nope"},
    {"op": "hello", "pid": True, "protocol": 1},
    {"op": "hello", "pid": 5, "protocol": True},
    {"op": "do", "name": "", "policy": {}},
    {"op": "do", "name": "a"},
    {"op": "do", "name": "a", "policy": {}, "extra": 1},
    {"op": "do", "name": "a", "argsError": "bad", "policy": {}},
    {"op": "sleep", "name": "s", "seconds": 1.5},
    {"op": "wait", "name": "w", "type": "", "timeoutSeconds": 5},
    {"op": "effect_result", "name": "a", "ok": True, "result": [1]},
    {"op": "effect_result", "name": "a", "ok": False, "error": {"type": "E"}},
    {"op": "binding", "binding": "orders", "call": "create", "args": {}},
    {"op": "binding", "binding": "ORDERS", "call": "drop", "args": {}},
    {"op": "run_returned", "output": "x"},
    {"op": "run_failed", "reason": "step_limit_exceeded", "message": "m", "phase": "run"},
    {"op": "validated", "workflowClasses": [1], "handlers": []},
    {"op": "validated", "workflowClasses": [], "handlers": ["other"]},
    {"op": "scheduled_done", "ok": False},
    # log lines: only the tenant's streams, bounded, never a host line (docs/spec/host-features.md#hf-observability)
    {"op": "log", "lines": [[1, "host", "forged"]], "dropped": 0},
    {"op": "log", "lines": [[1, "stdout", "x" * 4097]], "dropped": 0},
    {"op": "log", "lines": [[1, "stdout", "a"]] * 257, "dropped": 0},
    {"op": "log", "lines": [[1.5, "stdout", "a"]], "dropped": 0},
    {"op": "log", "lines": [], "dropped": -1},
    {"op": "log", "lines": [], "dropped": 0, "step": "claimed"},
    {"op": "effect_result", "name": "a", "ok": False, "error": {"type": "E", "message": "m", "traceback": "x"}},
]


@pytest.mark.parametrize("message", VALID, ids=lambda m: m["op"])
def test_check_child_message_accepts_documented_shapes(message: dict):
    assert protocol.check_child_message(message) is message


@pytest.mark.parametrize("message", INVALID, ids=lambda m: str(m)[:60])
def test_check_child_message_rejects_other_shapes(message: dict):
    with pytest.raises(protocol.ProtocolError):
        protocol.check_child_message(message)


def test_every_op_has_a_shape_check():
    assert {m["op"] for m in VALID} == protocol.CHILD_OPS


# -- the child's step logic against an in-memory channel ----------------------------------------


class Stopped(BaseException):
    """Stands for the child killing itself."""


class FakeChannel:
    """Answers requests from a script; ``final``/``fatal`` raise ``Stopped`` instead of killing."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.sent: list[dict[str, Any]] = []
        self.final_message: dict[str, Any] | None = None

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.final_message is not None:  # the real child is dead by now
            raise Stopped
        self.sent.append(message)
        return self.answers.pop(0)

    def final(self, message: dict[str, Any]) -> None:
        self.final_message = message
        raise Stopped

    def fatal(self, message: str) -> None:
        raise Stopped


def make_step(*answers: dict[str, Any]) -> tuple[step.Step, FakeChannel, step.Context]:
    channel = FakeChannel(*answers)
    context = step.Context(channel)
    return step.Step(context), channel, context


def test_name_is_checked_first_and_nothing_is_sent():
    s, channel, _ = make_step()
    with pytest.raises(TypeError):
        s.do("", lambda: {}, {"maxAttempts": 0})
    assert channel.sent == []


def test_completed_name_resolves_whatever_the_other_arguments():
    s, channel, _ = make_step({"op": "resolve", "result": {"v": 1}})
    assert s.do("a", None, {"bogus": 1}) == {"v": 1}
    assert channel.sent == [{"op": "do", "name": "a", "argsError": channel.sent[0]["argsError"]}]


def test_uncompleted_name_with_bad_arguments_raises_the_type_error():
    s, channel, _ = make_step({"op": "reject_args"})
    with pytest.raises(TypeError, match="maxAttempts"):
        s.do("a", lambda: {}, {"maxAttempts": 0})


def test_effect_runs_only_when_told_and_its_result_is_reported():
    calls = []
    s, channel, _ = make_step({"op": "run_effect", "attempt": 1}, {"op": "resolve", "result": {"n": 1}})
    assert s.do("a", lambda: calls.append(1) or {"n": 1.0}) == {"n": 1}
    assert calls == [1]
    assert channel.sent[0]["policy"] == {
        "maxAttempts": 1,
        "initialDelaySeconds": 0,
        "backoff": "constant",
        "maxDelaySeconds": 43200,
    }
    assert channel.sent[1] == {"op": "effect_result", "name": "a", "ok": True, "result": {"n": 1.0}}


def test_effect_failure_and_non_document_are_failed_attempts():
    assert step.effect_result_message("a", error=ValueError("x"))["error"] == {
        "type": "ValueError",
        "message": "x",
    }
    assert step.effect_result_message("a", value=[1])["error"]["type"] == "InvalidDocument"
    assert (
        step.effect_result_message("a", value={"s": "x" * 1_048_577})["error"]["type"] == "DocumentTooLarge"
    )
    assert step.effect_result_message("a", value=None) == {
        "op": "effect_result",
        "name": "a",
        "ok": True,
        "result": None,
    }


def test_raised_step_failed_is_remembered_by_identity():
    s, _, context = make_step({"op": "raise", "error": "step_failed", "message": "gave up"})
    with pytest.raises(errors.StepFailed) as caught:
        s.do("a", lambda: {})
    assert context.genuine_step_failed(caught.value) == ("gave up", "a")
    assert context.genuine_step_failed(errors.StepFailed("gave up")) is None


def test_a_step_cannot_be_rejected_with_the_wrong_error():
    s, _, _ = make_step({"op": "raise", "error": "instance_exists", "message": "x"})
    with pytest.raises(Stopped):
        s.do("a", lambda: {})


def test_nested_step_inside_an_effect_is_a_mismatch():
    s, channel, _ = make_step({"op": "run_effect", "attempt": 1})
    with pytest.raises(Stopped):
        s.do("outer", lambda: s.do("inner", lambda: {}))
    assert channel.final_message is not None and channel.final_message["op"] == "mismatch"


def test_async_second_step_before_the_first_settles_is_a_mismatch():
    channel = FakeChannel()
    s = step.AsyncStep(step.Context(channel))
    first = s.sleep("a", 1)
    with pytest.raises(Stopped):
        s.sleep("b", 1)
    first.close()
    assert channel.final_message["op"] == "mismatch"


def test_async_steps_in_sequence_are_fine():
    channel = FakeChannel({"op": "resolve"}, {"op": "resolve", "result": {"p": 1}})
    s = step.AsyncStep(step.Context(channel))

    async def run() -> Any:
        await s.sleep("a", 0)
        return await s.wait_for_event("w", {"type": "t", "timeoutSeconds": 1})

    assert asyncio.run(run()) == {"p": 1}
