"""Start and stop the real host processes (API, Celery worker, beat) for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import requests


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class HostProcess:
    """A running host process with its log file; ``stop()`` is idempotent."""

    name: str
    proc: subprocess.Popen
    log_path: str
    extra: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the process and its pool/children)."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.proc.wait(10)


def stop_all(processes: list[HostProcess], timeout: float = 10.0) -> None:
    """Stop ``processes`` side by side: SIGCONT and SIGTERM to every live one, then wait for each
    (SIGKILL after ``timeout`` seconds of waiting for it), as ``stop()`` one after another would,
    in the time of the slowest instead of the sum."""
    live = [p for p in processes if p.alive()]
    for process in live:
        process.kill(signal.SIGCONT)  # a frozen one must see its SIGTERM
        process.kill(signal.SIGTERM)
    for process in live:
        try:
            process.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill(signal.SIGKILL)
            process.proc.wait(10)


def _start(name: str, args: list[str], env: dict[str, str] | None) -> HostProcess:
    log = tempfile.NamedTemporaryFile(prefix=f"takohost-{name}-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_cli", *args],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})}, start_new_session=True,
    )
    return HostProcess(name=name, proc=proc, log_path=log.name)


def wait_for_log(process: HostProcess, needle: str, timeout: float = 30.0) -> None:
    """Wait until ``needle`` appears in the process log (or fail with the log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in process.log():
            return
        if not process.alive():
            raise RuntimeError(f"{process.name} exited early:\n{process.log()}")
        time.sleep(0.1)
    raise TimeoutError(f"{process.name} did not log {needle!r} in {timeout}s:\n{process.log()[-4000:]}")


def start_worker(
    *, concurrency: int = 2, pool: str = "prefork", env: dict[str, str] | None = None, wait: bool = True
) -> HostProcess:
    """Start ``takohost worker`` (Celery pool ``pool``) and wait until Celery reports it ready
    (``wait=False``: return at once; :func:`wait_ready` later)."""
    process = _start("worker", ["worker", f"--concurrency={concurrency}", f"--pool={pool}"], env)
    return wait_ready(process) if wait else process


def start_beat(*, env: dict[str, str] | None = None, wait: bool = True) -> HostProcess:
    """Start ``takohost beat`` and wait until it logs that the scheduler started (``wait=False``:
    return at once; :func:`wait_ready` later)."""
    process = _start("beat", ["beat"], env)
    return wait_ready(process) if wait else process


def start_api(*, port: int | None = None, env: dict[str, str] | None = None, wait: bool = True) -> HostProcess:
    """Start ``takohost api`` (gunicorn) on ``port`` and wait for ``/healthz`` (``wait=False``:
    return at once, ``.extra['url']`` set; :func:`wait_ready` later)."""
    port = port or free_port()
    process = _start("api", ["api", f"--port={port}", "--workers=2"], env)
    process.extra["url"] = f"http://127.0.0.1:{port}"
    return wait_ready(process) if wait else process


#: What a worker and a beat log once they are ready.
READY_LINES = {"worker": "ready.", "beat": "beat: Starting"}


def is_ready(process: HostProcess) -> bool:
    """Whether a worker or beat has logged that it is ready (no waiting)."""
    return process.alive() and READY_LINES[process.name] in process.log()


def wait_ready(process: HostProcess) -> HostProcess:
    """Wait until ``process`` (from a ``start_*`` call) is ready, as its ``start_*`` would; returns
    it. Processes started with ``wait=False`` start side by side and are waited for together."""
    if process.name in READY_LINES:
        wait_for_log(process, READY_LINES[process.name], timeout=60)
    elif process.name == "api":
        _wait_healthy(process, timeout=60)
    else:
        raise ValueError(f"no readiness check for {process.name!r}")
    return process


def _wait_healthy(process: HostProcess, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{process.extra['url']}/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        if not process.alive():
            raise RuntimeError(f"api exited early:\n{process.log()}")
        time.sleep(0.2)
    raise TimeoutError(f"api not healthy:\n{process.log()[-4000:]}")
