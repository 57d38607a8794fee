"""``ChildHandle.ping`` never blocks the heartbeat's pinger thread: a child that stops reading its
channel (tenant code in one long C call) fills the socket's buffer, and its pings are dropped."""

from __future__ import annotations

import threading
import time

from takohost.runtime import protocol
from tests.support.child_channel import child_channel


def test_pings_to_a_child_that_never_reads_return_at_once_and_the_channel_stays_framed():
    with child_channel() as (handle, child_end, _):
        done = threading.Event()

        def flood():
            for _ in range(100_000):  # far past any socket buffer (about 280 pings fill one)
                handle.ping()
            done.set()

        pinger = threading.Thread(target=flood, daemon=True)
        started = time.monotonic()
        pinger.start()
        assert done.wait(20), "ping blocked on a full channel"
        assert time.monotonic() - started < 20
        # What did arrive is whole frames: the child reads pings, nothing torn.
        child_end.setblocking(False)
        data = b""
        while True:
            try:
                chunk = child_end.recv(1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        frames = protocol.FrameBuffer(max_containers=protocol.CHILD_MAX_CONTAINERS)
        messages = frames.feed(data)
        assert messages and all(m == {"op": "ping"} for m in messages)
        assert frames.pending == 0


def test_a_ping_while_another_thread_holds_the_send_lock_is_skipped_not_waited_for():
    with child_channel() as (handle, child_end, _):
        with handle._send_lock:  # another thread is sending a frame
            started = time.monotonic()
            handle.ping()
            assert time.monotonic() - started < 0.5
        handle.ping()
        child_end.settimeout(2)
        assert child_end.recv(1 << 16)  # once the lock is free the ping goes out
