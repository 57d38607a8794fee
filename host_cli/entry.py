"""The ``takohost`` console script: :func:`run` imports the command and runs it, so that a Ctrl-C
at any moment — while the heavy modules import at start-up, inside a command, on the way out —
ends the command with ``interrupted`` on stderr and exit status 130, never a traceback
(docs/spec/host-features.md#hf-console). Kept tiny: the console script imports this module first.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

INTERRUPTED = 130


def run() -> None:
    """Run ``takohost`` (``host_cli.main.main``); exit 130 on ``KeyboardInterrupt``, also one that
    lands in a finalizer or a ``__del__`` (a socket closed by the garbage collector), where Python
    would print "Exception ignored in" with a traceback and go on."""
    sys.unraisablehook = _unraisable
    try:
        from host_cli.main import main

        main()
    except KeyboardInterrupt:
        _interrupted()


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
        _interrupted()
    sys.__unraisablehook__(unraisable)


def _interrupted() -> NoReturn:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C on the way out: no traceback
    try:
        sys.stdout.flush()
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(INTERRUPTED)  # skip interpreter teardown, where another interrupt would print one
