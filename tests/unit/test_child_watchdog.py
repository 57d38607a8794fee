"""The child's watchdog (DESIGN: the child kills itself when the context stops pinging) must not
kill a healthy child whose reader thread was starved while pings kept arriving."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from takohost.runtime import child, protocol


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

    monkeypatch.setattr(child, "die", fake_die)
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
    channel = child.Channel(theirs, buffer=_StarvedOnce(stall_s=0.6), watchdog_seconds=0.3)
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
    channel = child.Channel(theirs, buffer=protocol.FrameBuffer(), watchdog_seconds=0.2)
    started = time.monotonic()
    channel.start()
    assert deaths.wait(2.0)
    assert time.monotonic() - started >= 0.2
    ours.close()
