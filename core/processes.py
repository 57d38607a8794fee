"""Whether a process is still running, for the host's bookkeeping of its own processes: the
embedded servers' leftovers (``host_cli.embedded``) and the metrics directories of commands that
are gone (``services.telemetry.metrics``). Standard library only; it reads ``/proc``.
"""

from __future__ import annotations

import os

__all__ = ["running"]


def running(pid: int) -> bool:
    """``True`` while process ``pid`` exists and is not a zombie (one that exited and waits to be
    reaped, by us or by nobody, runs no code); also ``True`` for a process of another user, which
    we may not signal. ``False`` for a pid nobody has."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
