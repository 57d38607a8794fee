"""The zygote client: ``Zygote`` starts ``takohost.runtime.zygote`` (scrubbed environment, no
inherited descriptor but its two pipes) and asks it for children (:class:`ChildHandle`).

Fork safety: a ``Zygote`` may be started in a Celery main process and used from its prefork pool
children and from several threads. Each process opens its own connection to the zygote socket
on first use (a connection inherited over ``fork`` is never used: ``os.register_at_fork`` resets
the client state in the child); threads of one process share that connection under a lock. Only
the starting process may ``stop()`` the zygote; the zygote stays alive while any process holding
its control pipe (the starter or a fork of it) lives. ``get_zygote()`` is the lazily started
per-process default.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any

from takohost.runtime import boot, isolation, protocol
from workers import owned_process
from workers.egress import config as egress_config
from workers.packages import config as package_config
from workers.packages import layers as package_layers
from workers.sandbox.child import ChildGone, ChildHandle

__all__ = ["Zygote", "ZygoteUnavailable", "get_zygote"]

logger = logging.getLogger(__name__)


class ZygoteUnavailable(RuntimeError):
    """The zygote is not running or did not answer a spawn request."""


def _packages_dir() -> str | None:
    """The layers directory to mount (created if needed), or ``None`` when it cannot be made:
    then only Versions without requirements run (a Version with them fails to import, saying so)."""
    try:
        return package_layers.prepare(package_config.current().package_dir)
    except (OSError, ValueError):
        logger.warning("the package layers directory cannot be prepared; no layer is mounted", exc_info=True)
        return None


class Zygote(owned_process.OwnedProcess):
    """Client (and, in the starting process, owner) of one fork-server process.

    ``python`` is the interpreter to run (default ``sys.executable``); ``child_stderr`` keeps the
    children's stderr (tracebacks of the runtime itself) instead of ``/dev/null``, for debugging.
    ``stop`` (the owner's) closes the control pipe: the zygote kills every child group and exits.
    """

    _name = "the zygote"
    _unavailable = ZygoteUnavailable

    def __init__(
        self,
        *,
        python: str | None = None,
        child_stderr: bool = False,
        policy: isolation.policy.Policy | None = None,
    ) -> None:
        self._python = python or sys.executable
        self._child_stderr = child_stderr
        if policy is None:
            policy = isolation.policy.Policy.from_environ()
            if policy.network == "public":  # listen on every port some Space may reach
                policy = dataclasses.replace(policy, egress_ports=egress_config.current().listen_ports)
            # Every context sees the layers directory read-only; a job names its Version's layer.
            policy = dataclasses.replace(policy, packages_dir=_packages_dir())
        self.policy = policy
        self._init_owned()

    @property
    def pid(self) -> int | None:
        """The zygote's pid (``None`` before ``start``)."""
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout: float = 10.0) -> None:
        """Start the zygote and wait until it listens (``ZygoteUnavailable`` after ``timeout``)."""
        if self._proc is not None:
            raise RuntimeError("this Zygote was already started")
        self._make_dir(prefix="takohost-zygote-", socket_name="zygote.sock")
        flags, env = _interpreter_flags(self._python)
        # The interpreter runs as "takohost-sandbox" with the boot script read from a descriptor:
        # its command line (which every context inherits: sys.orig_argv, /proc/self/cmdline)
        # names no host path, and the SDK's modules are named by their place in a context
        # (takohost/runtime/boot.py).
        boot_fd = os.open(os.path.join(self.policy.sdk_dir, "runtime", "boot.py"), os.O_RDONLY)

        def command(control_fd: int, ready_fd: int) -> list[str]:
            return [
                "takohost-sandbox",
                *flags,
                "-c",
                boot.command(boot_fd),
                "--control-fd",
                str(control_fd),
                "--ready-fd",
                str(ready_fd),
            ]

        # On its standard input, not its command line: children inherit the zygote's memory.
        packages = boot.package_dirs()
        settings = (
            json.dumps({"packages": packages}) + "\n" + json.dumps({
                "socket": self.socket_path,
                "policy": self.policy.to_json(),
                "keepChildStderr": self._child_stderr,
                "packages": packages,
            })
        ).encode()
        answer = self._launch(
            command, timeout=timeout, pass_fds=(boot_fd,), stdin=settings, executable=self._python, env=env
        )
        self._check_ready(answer, timeout=timeout)

    def spawn(
        self, job: dict[str, Any] | None, *, space: str | None = None, hello_timeout: float = 5.0
    ) -> ChildHandle:
        """Fork a child, wait for its ``hello`` and send it ``job`` (a PROTOCOL.md job, ``op``
        optional; ``None`` sends nothing) for code of ``space`` (:meth:`ChildHandle.send_job`).
        Raises ``ZygoteUnavailable`` when the zygote does not answer, ``ChildGone``/``TimeoutError``
        when the child does not say hello (it is killed)."""
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        started = time.perf_counter()
        try:
            pid, pidfd, freezer_fd = self._request_child(child_end)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        handle = ChildHandle(parent_end, pid=pid, pidfd=pidfd, freezer_fd=freezer_fd)
        try:
            hello = handle.recv(timeout=hello_timeout)
            if hello.get("op") != "hello":
                raise ChildGone(f"child {pid} did not say hello: {hello.get('op')!r}")
            handle.spawn_seconds = time.perf_counter() - started
            if job is not None:
                handle.send_job(job, space=space)
        except BaseException:
            handle.kill_and_wait()
            handle.close()
            raise
        return handle

    def _request_child(self, child_end: socket.socket) -> tuple[int, int, int]:
        with self._lock:
            sock = self._connection()
            try:
                socket.send_fds(sock, [protocol.encode_frame({"op": "spawn"})], [child_end.fileno()])
                buffer = protocol.FrameBuffer()
                received: list[int] = []
                messages: list[dict[str, Any]] = []
                while not messages:
                    data, fds, _, _ = socket.recv_fds(sock, 4096, 4)
                    received.extend(fds)
                    if not data:
                        raise OSError("the zygote closed the connection")
                    messages = buffer.feed(data)
            except (OSError, protocol.ProtocolError) as exc:
                self._close_connection()
                raise ZygoteUnavailable(f"spawn request failed: {exc}") from None
        reply = messages[0]
        if reply.get("op") != "spawned" or type(reply.get("pid")) is not int or len(received) not in (1, 2):
            for fd in received:
                os.close(fd)
            raise ZygoteUnavailable(f"the zygote refused to spawn: {reply.get('message', reply.get('op'))}")
        # the pidfd, then (where the host has a freezer) the context's freezer cgroup
        return reply["pid"], received[0], received[1] if len(received) == 2 else -1


def _interpreter_flags(python: str) -> tuple[list[str], dict[str, str]]:
    """The zygote interpreter's options and environment. Started under a name that is no path,
    it cannot find its standard library from its own location (it would search from its working
    directory): it is told its home (``PYTHONHOME``, the base installation of ``python``), with
    ``-I``'s isolation spelled out but for the environment (``-s -P``; the environment holds
    nothing else to read). The zygote resets its environment before any child exists."""
    home = sys.base_prefix if sys.base_exec_prefix == sys.base_prefix else f"{sys.base_prefix}:{sys.base_exec_prefix}"
    if python != sys.executable:
        probe = [python, "-I", "-c", "import sys; print(sys.base_prefix + ':' + sys.base_exec_prefix)"]
        home = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    return ["-s", "-P", "-B"], {**isolation.policy.CONTEXT_ENV, "PYTHONHOME": home}


_DEFAULT = owned_process.ProcessDefault(Zygote)


def get_zygote() -> Zygote:
    """The process-wide zygote, started on first use (and restarted by its owner if it died).
    A process forked after it was started reuses it through a new connection."""
    return _DEFAULT.get()
