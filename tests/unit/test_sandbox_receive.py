"""The one child-receive loop (``workers.sandbox.receive``) that replay contexts and cron
deliveries share: a real ``ChildHandle`` over a socketpair, its pidfd a real process's, the
test playing the child's side of the channel."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from takohost.runtime import protocol
from tests.support.child_channel import child_channel
from workers import sandbox, tenant_logs
from workers.sandbox import receive


@pytest.fixture()
def channel():
    """``(handle, child_end, process)``: a handle whose "child" is a sleeping process."""
    with child_channel() as parts:
        yield parts


def _collector() -> tenant_logs.LogCollector:
    """A collector whose clock stands still: nothing is ever due, so nothing is written."""
    return tenant_logs.LogCollector(connection=_no_database, delivery_pk=1, clock=lambda: 0.0)


def _no_database():
    raise AssertionError("nothing may be written in this test")


def _send(end: socket.socket, *messages: dict) -> None:
    end.sendall(b"".join(protocol.encode_frame(m) for m in messages))


LOG = {"op": "log", "lines": [[0, "stdout", "hello"]], "dropped": 0}
DONE = {"op": "scheduled_done", "ok": True}


def test_log_frames_go_to_the_logs_and_the_next_other_frame_is_returned(channel):
    handle, end, _ = channel
    logs = _collector()
    _send(end, LOG, LOG, DONE)
    assert receive.receive(handle, logs=logs, space=None) == DONE
    assert len(logs._lines) == 2 and logs._lines[0][4] == "hello"


def test_a_log_frame_without_logs_or_over_the_budget_is_a_violation(channel):
    handle, end, _ = channel
    _send(end, LOG)
    with pytest.raises(receive.Violation, match="without a log collector"):
        receive.receive(handle, logs=None, space=None)
    _send(end, {"op": "log", "lines": [], "dropped": 0})
    with pytest.raises(receive.Violation, match="log flood: an empty log frame"):
        receive.receive(handle, logs=_collector(), space=None)


def test_a_malformed_frame_is_a_violation(channel):
    handle, end, _ = channel
    _send(end, {"op": "log", "lines": "nope", "dropped": 0})
    with pytest.raises(receive.Violation, match="too many lines|lines"):
        receive.receive(handle, logs=_collector(), space=None)


def test_the_deadline_ends_a_wait_with_no_frame_but_logs(channel):
    handle, end, _ = channel
    stop = threading.Event()

    def chatter() -> None:  # logs keep coming, but no frame the caller waits for
        while not stop.wait(0.05):
            with contextlib.suppress(OSError):
                _send(end, LOG)

    thread = threading.Thread(target=chatter, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(receive.Overtime):
            receive.receive(handle, logs=_collector(), space=None, deadline=started + 0.3)
    finally:
        stop.set()
        thread.join()
    assert 0.3 <= time.monotonic() - started < 2.0


def test_poll_runs_before_every_wait_bounds_it_and_may_end_it(channel):
    handle, end, _ = channel
    calls: list[float] = []

    class Done(Exception):
        pass

    def poll() -> float:
        calls.append(time.monotonic())
        if len(calls) == 4:
            raise Done
        return 0.05

    started = time.monotonic()
    with pytest.raises(Done):
        receive.receive(handle, logs=_collector(), space=None, poll=poll)
    assert len(calls) == 4 and time.monotonic() - started < 1.0  # three waits of at most 0.05 s


def test_intercept_consumes_frames_before_the_log_handling(channel):
    handle, end, _ = channel
    seen: list[str] = []

    def intercept(message: dict) -> bool:
        seen.append(message["op"])
        return message["op"] == "code"

    logs = _collector()
    _send(end, {"op": "code", "modules": {"main.py": "AAAA"}}, LOG, DONE)
    assert receive.receive(handle, logs=logs, space=None, intercept=intercept) == DONE
    assert seen == ["code", "log", "scheduled_done"] and len(logs._lines) == 1


def test_a_child_that_is_gone_raises_child_gone(channel):
    handle, end, process = channel
    _send(end, LOG)
    end.close()
    process.kill()
    process.wait()
    logs = _collector()
    with pytest.raises(sandbox.ChildGone):
        receive.receive(handle, logs=logs, space=None)
    assert len(logs._lines) == 1  # the frame sent before it went is still taken
