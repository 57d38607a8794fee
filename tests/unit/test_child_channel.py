"""The child's end of its channel (``takohost.runtime.child.channel``) over a real socketpair: the
framing of requests and answers, the job frame a pre-spawned child waits for, and the watchdog
(docs/spec/architecture.md: the child kills itself when the context stops pinging), which must not kill a healthy
child whose reader thread was starved while pings kept arriving. ``hygiene.die`` is replaced by
an event (the reader thread stops where the process would have died)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from takohost.runtime import protocol
from takohost.runtime.child import channel as channel_module
from takohost.runtime.child import hygiene


class _StarvedOnce(protocol.FrameBuffer):
    """A frame buffer whose first ``feed`` stalls past the watchdog, as a CPU-starved thread does."""

    def __init__(self, stall_s: float) -> None:
        super().__init__()
        self._stall_s = stall_s

    def feed(self, data: bytes):
        stall, self._stall_s = self._stall_s, 0.0
        time.sleep(stall)
        return super().feed(data)


@pytest.fixture
def deaths(monkeypatch):
    died = threading.Event()

    def fake_die():
        died.set()
        threading.Event().wait()  # the reader thread stops here, as the process would

    monkeypatch.setattr(hygiene, "die", fake_die)
    return died


def _pinger(sock: socket.socket, stop: threading.Event, every_s: float) -> threading.Thread:
    def run():
        while not stop.is_set():
            protocol.write_frame(sock, {"op": "ping"})
            time.sleep(every_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_starved_reader_drains_queued_pings_before_its_watchdog_fires(deaths):
    ours, theirs = socket.socketpair()
    channel = channel_module.Channel(theirs, buffer=_StarvedOnce(stall_s=0.6), watchdog_seconds=0.3)
    channel.start()
    stop = threading.Event()
    _pinger(ours, stop, every_s=0.05)
    try:
        assert not deaths.wait(1.5), "a child that kept receiving pings killed itself"
    finally:
        stop.set()
    assert deaths.wait(2.0), "the watchdog must still fire once pings stop"
    ours.close()


def test_the_watchdog_fires_without_pings(deaths):
    ours, theirs = socket.socketpair()
    channel = channel_module.Channel(theirs, buffer=protocol.FrameBuffer(), watchdog_seconds=0.2)
    started = time.monotonic()
    channel.start()
    assert deaths.wait(2.0)
    assert time.monotonic() - started >= 0.2
    ours.close()


def _read(sock: socket.socket, buffer: protocol.FrameBuffer, timeout: float = 2.0) -> dict:
    sock.settimeout(timeout)
    while True:
        messages = buffer.feed(sock.recv(1 << 16))
        if messages:
            assert len(messages) == 1, messages
            return messages[0]


def test_a_request_gets_the_parents_next_frame_that_is_not_a_ping(deaths):
    ours, theirs = socket.socketpair()
    channel = channel_module.Channel(theirs, buffer=protocol.FrameBuffer(), watchdog_seconds=None)
    channel.start()
    answers: list[dict] = []
    caller = threading.Thread(target=lambda: answers.append(channel.request({"op": "do", "name": "s"})))
    caller.start()
    assert _read(ours, protocol.FrameBuffer()) == {"op": "do", "name": "s"}
    ours.sendall(protocol.encode_frame({"op": "ping"}) * 2 + protocol.encode_frame({"op": "run_effect", "attempt": 1}))
    caller.join(2.0)
    assert answers == [{"op": "run_effect", "attempt": 1}]
    assert not deaths.is_set()
    ours.close()
    assert deaths.wait(2.0), "EOF on the channel kills the child"


def test_a_frame_that_is_not_a_frame_kills_the_child(deaths):
    ours, theirs = socket.socketpair()
    channel_module.Channel(theirs, buffer=protocol.FrameBuffer(), watchdog_seconds=None).start()
    ours.sendall(b"\xff\xff\xff\xff" + b"x" * 16)  # a length far over the frame limit
    assert deaths.wait(2.0)
    ours.close()


def test_nothing_is_sent_after_the_final_message(deaths):
    ours, theirs = socket.socketpair()
    channel = channel_module.Channel(theirs, buffer=protocol.FrameBuffer(), watchdog_seconds=None)
    channel.send({"op": "run_returned", "output": None})
    late = threading.Thread(target=channel.send, args=({"op": "run_returned", "output": 1},), daemon=True)
    late.start()
    late.join(0.3)
    assert late.is_alive(), "a second final message must block forever"
    buffer = protocol.FrameBuffer()
    assert _read(ours, buffer) == {"op": "run_returned", "output": None}
    ours.settimeout(0.2)
    with pytest.raises(TimeoutError):
        ours.recv(1)
    ours.close()


def _job_channel(first: bytes) -> tuple[socket.socket, channel_module.Channel]:
    ours, theirs = socket.socketpair()
    channel = channel_module.Channel(None, buffer=protocol.FrameBuffer(), watchdog_seconds=None)
    ours.sendall(first)
    channel.start(expect_job=True, connect=lambda: theirs)
    return ours, channel


def test_a_prespawned_child_reads_its_job_and_arms_the_watchdog_the_job_names(deaths):
    job = {"op": "job", "kind": "validate", "watchdogSeconds": 0.3}
    ours, channel = _job_channel(protocol.encode_frame(job) + protocol.encode_frame({"op": "ping"}))
    assert channel.job() == job
    assert deaths.wait(2.0), "no ping after the job: the job's watchdog fires"
    ours.close()


@pytest.mark.parametrize("frames", [
    [{"op": "ping"}, {"op": "resolve"}],  # not a job first
    [{"op": "job", "kind": "validate"}, {"op": "resolve"}],  # an answer nobody asked for
])
def test_anything_but_a_job_first_kills_a_prespawned_child(deaths, frames):
    ours, _ = _job_channel(b"".join(protocol.encode_frame(f) for f in frames))
    assert deaths.wait(2.0)
    ours.close()


def test_a_prespawned_child_without_a_job_dies_after_the_job_timeout(deaths, monkeypatch):
    monkeypatch.setattr(channel_module, "JOB_TIMEOUT_SECONDS", 0.2)
    ours, _ = _job_channel(b"")
    assert deaths.wait(2.0)
    ours.close()
