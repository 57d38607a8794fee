"""host_cli.embedded stops its servers by signals in turn (PostgreSQL: SIGINT, then SIGQUIT;
Redis: SIGTERM), then SIGKILL, and reaps them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from host_cli import embedded

# Ignores the signals named on its command line; says so once it does.
STUBBORN = """
import signal, sys, time
for name in sys.argv[1:]:
    signal.signal(getattr(signal, name), signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def _child(*ignored: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN, *ignored], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_the_first_signal_that_ends_it_is_the_last_sent():
    proc = _child("SIGINT")
    embedded._end_child(proc, (signal.SIGINT, 0.2), (signal.SIGQUIT, 5))
    assert proc.returncode == -signal.SIGQUIT


def test_a_child_that_ignores_every_signal_is_killed_after_the_last_wait():
    proc = _child("SIGTERM")
    started = time.monotonic()
    embedded._end_child(proc, (signal.SIGTERM, 0.3))
    assert proc.returncode == -signal.SIGKILL and time.monotonic() - started >= 0.3


def test_a_child_that_already_exited_gets_no_signal():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    embedded._end_child(proc, (signal.SIGTERM, 1))
    assert proc.returncode == 0
