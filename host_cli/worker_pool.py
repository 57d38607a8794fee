"""``takohost worker --concurrency N`` (the default pool): N single-process Celery workers
(``--pool solo``) under one supervisor (docs/spec/host-features.md#hf-performance).

Why not Celery's prefork pool: a prefork worker is a main process that reads the broker and hands
each task to a pool process over a pipe — one more hop and one more process's CPU per task. Side by
side (``bench.engine_bench``, docs/performance.md) N solo processes give more steps/s and less CPU
per instance for the same N. Each solo process is a complete Celery worker: it consumes with
``acks_late`` and ``worker_prefetch_multiplier = 1`` (one unacknowledged message at a time), takes
the Redis lease and the Postgres fencing token per context exactly as a prefork pool process does,
and starts its own sandbox zygote. A message that a killed process held is redelivered by Redis
after the visibility timeout and, long before that, re-dispatched by beat's sweep from Postgres
(the lease expires) — as for a killed prefork worker.

The supervisor imports neither Celery nor SQLAlchemy. It:

* starts the N processes (``takohost worker --pool solo --supervised``) in its own process group,
  so that a signal to the group (a terminal's Ctrl-C, ``docker stop``, ``killpg``) reaches every
  process, and each arms ``PR_SET_PDEATHSIG(SIGKILL)``: a supervisor that is SIGKILLed takes them
  with it (their zygotes then see EOF on their control pipe and kill every sandbox child);
* restarts a process that exits while the supervisor is not stopping, after a pause that grows
  with consecutive quick crashes (1 s … :data:`MAX_RESTART_PAUSE_SECONDS`);
* on SIGTERM or SIGINT sends SIGTERM to every process (Celery's warm shutdown: the running
  context finishes, its message is acknowledged), waits up to ``stop_timeout`` seconds, then
  SIGKILLs what is left; a second SIGTERM/SIGINT SIGKILLs at once. It exits 0 after a clean stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from services.telemetry import metrics

log = logging.getLogger("takohost.worker")

#: Environment variable naming the supervisor's pid in each supervised process.
SUPERVISOR_PID_ENV = "TAKOHOST_WORKER_SUPERVISOR_PID"
#: Upper bound of the pause before restarting a process that keeps crashing (seconds).
MAX_RESTART_PAUSE_SECONDS = 30.0
#: A process that ran at least this long before exiting restarts after the shortest pause (seconds).
STABLE_SECONDS = 60.0

_PR_SET_PDEATHSIG = 1


def die_with_supervisor() -> None:
    """In a supervised process: get SIGKILL when the supervisor dies (``PR_SET_PDEATHSIG``), and
    exit at once if it already died before this call (our parent is then no longer its pid).
    No-op outside a supervisor."""
    supervisor = os.environ.pop(SUPERVISOR_PID_ENV, None)
    if supervisor is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != int(supervisor):
        os._exit(1)


@dataclass
class _Slot:
    """One supervised process: its Popen, when it started (monotonic s), quick crashes in a row."""

    index: int
    proc: subprocess.Popen | None = None
    #: argv of this slot when it is not the pool's ``command`` (:meth:`Supervisor.add_process`).
    command: list[str] | None = None
    started_at: float = 0.0
    quick_crashes: int = 0
    restart_at: float = 0.0


class Supervisor:
    """Runs ``concurrency`` copies of ``command`` until stopped; see the module docstring.

    ``command`` is the argv of one solo worker; ``stop_timeout`` the seconds a warm shutdown may
    take before SIGKILL. ``poll_seconds`` is how often exits are checked (the loop sleeps between).
    """

    def __init__(self, *, command: list[str], concurrency: int, stop_timeout: float = 30.0,
                 poll_seconds: float = 0.2) -> None:
        self.command = command
        self.slots = [_Slot(index=i) for i in range(concurrency)]
        self.stop_timeout = stop_timeout
        self.poll_seconds = poll_seconds
        self.stopping = False
        self.kill_now = False

    def add_process(self, command: list[str]) -> None:
        """Supervise one more process that runs ``command`` instead of the pool's (docs/spec/host-features.md#hf-newcomer:
        the control-plane consumer of ``takohost worker``); restarted and stopped like the others."""
        self.slots.append(_Slot(index=len(self.slots), command=command))

    def _signal(self, signum: int, _frame: object) -> None:
        if self.stopping:
            self.kill_now = True
        self.stopping = True

    def _start(self, slot: _Slot) -> None:
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
        slot.proc = subprocess.Popen(slot.command or self.command, env=env, stdin=subprocess.DEVNULL)
        slot.started_at = time.monotonic()
        log.info("worker process %d started (pid %d)", slot.index, slot.proc.pid)

    def _reap(self, slot: _Slot, now: float) -> None:
        """Schedule the restart of ``slot`` whose process has exited."""
        assert slot.proc is not None
        code = slot.proc.returncode
        metrics.process_exit(slot.proc.pid)  # a SIGKILLed process too: its live gauges stop counting
        ran = now - slot.started_at
        slot.quick_crashes = 0 if ran >= STABLE_SECONDS else slot.quick_crashes + 1
        pause = min(MAX_RESTART_PAUSE_SECONDS, float(2 ** max(0, slot.quick_crashes - 1)))
        slot.proc = None
        slot.restart_at = now + pause
        log.warning("worker process %d exited (code %s after %.1f s); restarting in %.0f s",
                    slot.index, code, ran, pause)

    def run(self) -> int:
        """Start every process, supervise until SIGTERM/SIGINT, stop them; returns the exit code."""
        previous = {sig: signal.signal(sig, self._signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in self.slots:
                self._start(slot)
            while not self.stopping:
                now = time.monotonic()
                for slot in self.slots:
                    if slot.proc is not None and slot.proc.poll() is not None:
                        self._reap(slot, now)
                    if slot.proc is None and now >= slot.restart_at and not self.stopping:
                        self._start(slot)
                time.sleep(self.poll_seconds)
            return self._stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self) -> int:
        running = [slot.proc for slot in self.slots if slot.proc is not None and slot.proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(proc.poll() is None for proc in running):
            if self.kill_now or time.monotonic() >= deadline:
                for proc in running:
                    if proc.poll() is None:
                        log.warning("worker process pid %d did not stop in time: SIGKILL", proc.pid)
                        with contextlib.suppress(ProcessLookupError):
                            proc.kill()
                for proc in running:
                    proc.wait()
                break
            time.sleep(0.05)
        log.info("all worker processes stopped")
        return 0


def solo_command(*, loglevel: str, extra: list[str] | None = None) -> list[str]:
    """argv of one supervised solo worker process (``python -m host_cli worker …``)."""
    return [sys.executable, "-m", "host_cli", "worker", "--pool=solo", "--concurrency=1", "--supervised",
            f"--loglevel={loglevel}", *(extra or [])]
