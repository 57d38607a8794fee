"""A real ``ChildHandle`` without a zygote, for the parent-side unit tests
(``tests/unit/test_sandbox_receive.py``, ``test_sandbox_session.py``): its "child" is a sleeping
process of its own session (its pidfd and process group are real), its channel a socketpair whose
other end the test holds to play the child."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator

from workers import sandbox


@contextlib.contextmanager
def child_channel() -> Iterator[tuple[sandbox.ChildHandle, socket.socket, subprocess.Popen]]:
    """``(handle, child_end, process)``: frames the test writes on ``child_end`` arrive at the
    handle; the process is killed and reaped, and both ends closed, on exit."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    handle = sandbox.ChildHandle(parent_end, pid=process.pid, pidfd=os.pidfd_open(process.pid))
    try:
        yield handle, child_end, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        child_end.close()
        handle.close()
