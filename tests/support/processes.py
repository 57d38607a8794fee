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
    *, concurrency: int = 2, pool: str = "prefork", env: dict[str, str] | None = None
) -> HostProcess:
    """Start ``takohost worker`` (Celery pool ``pool``) and wait until Celery reports it ready."""
    process = _start("worker", ["worker", f"--concurrency={concurrency}", f"--pool={pool}"], env)
    wait_for_log(process, "ready.", timeout=60)
    return process


def start_beat(*, env: dict[str, str] | None = None) -> HostProcess:
    """Start ``takohost beat`` and wait until it logs that the scheduler started."""
    process = _start("beat", ["beat"], env)
    wait_for_log(process, "beat: Starting", timeout=60)
    return process


def start_api(*, port: int | None = None, env: dict[str, str] | None = None) -> HostProcess:
    """Start ``takohost api`` (gunicorn) on ``port`` and wait for ``/healthz``."""
    port = port or free_port()
    process = _start("api", ["api", f"--port={port}", "--workers=2"], env)
    process.extra["url"] = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{process.extra['url']}/healthz", timeout=1).status_code == 200:
                return process
        except requests.RequestException:
            pass
        if not process.alive():
            raise RuntimeError(f"api exited early:\n{process.log()}")
        time.sleep(0.2)
    raise TimeoutError(f"api not healthy:\n{process.log()[-4000:]}")
