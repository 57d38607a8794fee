"""core.processes.running: one answer to "does this pid still run" for the embedded servers'
leftovers and the metrics directories of gone commands (a zombie runs no code)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from core import processes
from services.telemetry import metrics


def _zombie() -> int:
    """A child of ours that exited and is not reaped yet."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return pid
        time.sleep(0.01)
    raise AssertionError("the child did not exit")


def test_a_live_process_runs_and_a_zombie_or_a_free_pid_does_not():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert processes.running(sleeper.pid)
        assert processes.running(os.getpid())
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    assert not processes.running(sleeper.pid)  # reaped: nobody has it (until reused)
    zombie = _zombie()
    try:
        assert not processes.running(zombie)
    finally:
        os.waitpid(zombie, 0)


def test_metrics_removes_the_directory_of_a_command_that_is_a_zombie(tmp_path, monkeypatch):
    # Before: the metrics sweep signalled the pid only, so a command that exited but was not yet
    # reaped kept its directory (and its samples in the sums) until some later start.
    monkeypatch.setenv("TAKOHOST_METRICS_DIR", str(tmp_path))
    monkeypatch.delenv(metrics.ENV_DIR, raising=False)
    zombie = _zombie()
    try:
        gone = tmp_path / f"worker-{zombie}"
        gone.mkdir()
        mine = metrics.prepare("api")
        assert not gone.exists()
        assert os.path.isdir(mine)
    finally:
        os.waitpid(zombie, 0)
