"""Parent side of the user-code sandbox: the zygote client and child handles (PROTOCOL.md).

``Zygote`` starts ``takohost.runtime.zygote`` (scrubbed environment, no inherited descriptor but
its two pipes) and asks it for children; ``ChildHandle`` is one child: frames in and out, a
heartbeat, and ``kill_and_wait``, which **proves** that no process of the context — its PID
namespace, everything it started — runs again before returning ``True`` (docs/spec/architecture.md#ar-shape: stop, then
publish): by its frozen cgroup where the host has a freezer, else through its pidfd, by its exit.

Fork safety: a ``Zygote`` may be started in a Celery main process and used from its prefork pool
children and from several threads. Each process opens its own connection to the zygote socket
on first use (a connection inherited over ``fork`` is never used: ``os.register_at_fork`` resets
the client state in the child); threads of one process share that connection under a lock. Only
the starting process may ``stop()`` the zygote; the zygote stays alive while any process holding
its control pipe (the starter or a fork of it) lives. ``get_zygote()`` is the lazily started
per-process default.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from takohost.runtime import boot, isolation, protocol
from workers.egress import client as egress_client
from workers.egress import config as egress_config
from workers.packages import config as package_config
from workers.packages import layers as package_layers

__all__ = [
    "ChildGone",
    "ChildHandle",
    "ValidationOutcome",
    "Zygote",
    "ZygoteUnavailable",
    "get_zygote",
    "validate_version",
]

logger = logging.getLogger(__name__)

_RECV_BYTES = 1 << 16  # below malloc's mmap threshold
#: Most descriptors a hello may carry (one listener per egress port and the DNS socket).
_MAX_EGRESS_FDS = 40


class ChildGone(Exception):
    """The child's channel reached EOF or the child process is gone."""


class ZygoteUnavailable(RuntimeError):
    """The zygote is not running or did not answer a spawn request."""


def _readable(fd: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``fd`` to become readable (poll: no FD_SETSIZE limit)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


class ChildHandle:
    """One sandbox child, as returned by ``Zygote.spawn``.

    Attributes: ``pid`` (also its process-group id), ``spawn_seconds`` (spawn request → hello
    frame received, seconds). ``send``/``ping`` may be called from any thread; ``recv`` from one
    thread at a time. Use as a context manager to ``kill_and_wait`` and ``close`` on exit.
    """

    def __init__(self, sock: socket.socket, *, pid: int, pidfd: int, freezer_fd: int = -1) -> None:
        self.pid = pid
        self.spawn_seconds = 0.0
        #: How the last :meth:`kill_and_wait` proved the stop: ``"frozen"`` or ``"exited"``.
        self.stop_proof = ""
        self._sock = sock
        self._pidfd = pidfd
        self._freezer_fd = freezer_fd
        self._buffer = protocol.FrameBuffer(max_containers=protocol.CHILD_MAX_CONTAINERS)  # untrusted
        self._ready: list[dict[str, Any]] = []
        self._eof = False
        self._send_lock = threading.Lock()
        self._stop_heartbeat = threading.Event()
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self._poller.register(pidfd, select.POLLIN)
        #: The listeners of the child's network namespace, received with its ``hello`` (public
        #: egress; ``isolation.network``) until :meth:`send_job` hands them to the egress proxy.
        self.egress_fds: list[int] = []
        #: The context's registration with the egress proxy, from :meth:`send_job` on.
        self.egress: egress_client.Session | None = None
        self._want_fds = True

    def __enter__(self) -> ChildHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pidfd >= 0:
            self.kill_and_wait()
        self.close()

    # -- frames ------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        """Send one frame to the child. Raises ``ChildGone`` if the channel is closed,
        ``ProtocolError`` if ``message`` cannot be framed."""
        frame = protocol.encode_frame(message)
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise ChildGone(f"child {self.pid}: channel closed ({exc})") from None

    def ping(self) -> None:
        """Send a ``ping`` (keeps the child's watchdog from firing). ``ChildGone`` if closed."""
        self.send({"op": "ping"})

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The child's next message (``timeout`` in seconds, ``None`` = wait forever).

        Raises ``TimeoutError`` when nothing arrives in time, ``ChildGone`` on EOF or when the
        child process has exited and no buffered frame is left, ``ProtocolError`` for a malformed
        frame (the child is untrusted: also check each message with
        ``protocol.check_child_message``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready:
            if self._eof:
                raise ChildGone(f"child {self.pid} has gone")
            wait_ms = None if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
            events = dict(self._poller.poll(wait_ms))
            if not events:
                raise TimeoutError(f"child {self.pid} sent nothing within {timeout} s")
            if self._sock.fileno() in events:
                self._read_available(blocking=True)
            elif self._pidfd in events:
                # Dead, but its channel may still be held open by a process it forked.
                self._read_available(blocking=False)
                if not self._ready:
                    self._eof = True
        return self._ready.pop(0)

    def _read_available(self, *, blocking: bool) -> None:
        try:
            if self._want_fds:  # the hello: the runtime's listeners ride with it, before any tenant code
                data, fds, _, _ = socket.recv_fds(
                    self._sock, _RECV_BYTES, _MAX_EGRESS_FDS, 0 if blocking else socket.MSG_DONTWAIT
                )
                self._want_fds = False
                self.egress_fds.extend(fds)
            else:
                data = self._sock.recv(_RECV_BYTES, 0 if blocking else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof = True
            return
        self._ready.extend(self._buffer.feed(data))

    def send_job(self, job: dict[str, Any], *, space: str | None) -> None:
        """Send the child its ``job``; with public egress first hand its listeners to the egress
        proxy for code of ``space`` and add the Space's rules to the job (``egress``: the runtime
        raises clear errors with them, ``takohost.runtime.egress_hook``). ``space`` ``None``
        (a child with no Space: benches, tests) gets no way out. Raises ``ChildGone``, and
        ``EgressUnavailable`` when the proxy cannot be reached."""
        fds, self.egress_fds = self.egress_fds, []
        try:
            if fds and space is not None:
                proxy = egress_client.get_egress_proxy()
                self.egress = proxy.open(space=space, fds=fds)
                job = {**job, "egress": egress_client.job_part(space)}
        finally:
            for fd in fds:
                os.close(fd)
        self.send({**job, "op": "job"})

    def finish_egress(self) -> list[dict[str, Any]]:
        """After :meth:`kill_and_wait`: close the context's listeners and relays in the proxy and
        return the records not yet taken (``egress_client.Session.records``), waiting for the last
        ones only when a connection was still open."""
        session, self.egress = self.egress, None
        if session is None:
            return []
        return session.close(wait=session.open_connections > 0)

    # -- lifetime ----------------------------------------------------------------------------
    def start_heartbeat(self, interval_seconds: float) -> None:
        """Ping the child every ``interval_seconds`` from a daemon thread until the child is gone,
        ``kill_and_wait`` or ``close`` is called. Choose it well below the job's watchdog."""

        def beat() -> None:
            while not self._stop_heartbeat.wait(interval_seconds):
                try:
                    self.ping()
                except (ChildGone, OSError):
                    return

        threading.Thread(target=beat, name=f"takohost-heartbeat-{self.pid}", daemon=True).start()

    @property
    def pidfd(self) -> int:
        """The child's pidfd (readable once it exited); owned by this handle, ``-1`` after close."""
        return self._pidfd

    @property
    def exited(self) -> bool:
        """True once the child process has exited (its pidfd is readable)."""
        return _readable(self._pidfd, 0)

    def kill_and_wait(self, timeout: float = 5.0) -> bool:
        """Stop the child and everything it started, and prove it (docs/spec/architecture.md#ar-shape: stop, then
        publish): the one stop proof of replay contexts, cron deliveries and validations.

        Returns ``True`` only once no process of the context can run another instruction of
        user code. Where the context has a freezer cgroup (the zygote made one: root hosts with
        cgroup v1's freezer or cgroup v2), that is when the kernel confirms the cgroup
        ``FROZEN`` (:func:`isolation.cgroups.freeze`; no process can leave it): the child is
        then SIGKILLed, every process of it (``isolation.cgroups.kill_frozen``), and thawed, and
        dies and is reaped by the zygote off the caller's path,
        without running user code again (docs/spec/host-features.md: the status need not wait for the
        kernel to free the context's memory). Otherwise, or when the freeze is not confirmed
        within ``timeout``, :meth:`_kill_and_wait_exit` proves it by the child's exit.
        :attr:`stop_proof` says which proof held.
        """
        if self._pidfd < 0:
            raise RuntimeError("kill_and_wait after close: the pidfd is gone, nothing can be proven")
        self._stop_heartbeat.set()
        if self._freezer_fd >= 0 and isolation.cgroups.freeze(self._freezer_fd, timeout=min(timeout, 1.0)):
            try:
                isolation.cgroups.kill_frozen(self._freezer_fd)
            except OSError:
                logger.exception("could not kill the frozen context of child %s", self.pid)
            else:
                isolation.cgroups.thaw(self._freezer_fd)
                self.stop_proof = "frozen"
                return True
        return self._kill_and_wait_exit(timeout)

    def _kill_and_wait_exit(self, timeout: float) -> bool:
        """SIGKILL the child and wait until it is proven dead, with everything it started.

        Returns ``True`` only when the pidfd reported the child's exit within ``timeout`` seconds
        (it names exactly this process: it was opened before the child could be reaped). With
        namespaces (the default) the child is PID 1 of its own PID namespace, and the kernel
        reports its exit only after every other process of that namespace is dead: the proof
        covers ``setsid``, double forks and daemons. With ``TAKOHOST_SANDBOX_ISOLATION=none`` only
        the child's process group is SIGKILLed (here, or by the zygote before it reaps it); a
        process that left the group is not covered.
        """
        if self._pidfd < 0:
            raise RuntimeError("kill_and_wait after close: the pidfd is gone, nothing can be proven")
        self._stop_heartbeat.set()
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        if self._freezer_fd >= 0:  # after a freeze not confirmed: a frozen task takes SIGKILL when thawed (v1)
            isolation.cgroups.thaw(self._freezer_fd)
        try:
            signal.pidfd_send_signal(self._pidfd, 0)  # succeeds until the zygote has reaped it
        except ProcessLookupError:
            pass  # reaped: the zygote killed the group before reaping
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if not _readable(self._pidfd, timeout):
            logger.error("sandbox child %s not proven dead after %.1f s", self.pid, timeout)
            return False
        self.stop_proof = "exited"
        return True

    def close(self) -> None:
        """Close the channel and the pidfd (idempotent). Without ``kill_and_wait`` first this
        proves nothing: the child notices EOF and kills its own group."""
        self._stop_heartbeat.set()
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                self._poller.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._freezer_fd >= 0:
            os.close(self._freezer_fd)
            self._freezer_fd = -1
        for fd in self.egress_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.egress_fds = []
        if self.egress is not None:
            self.finish_egress()
        self._sock.close()


def _packages_dir() -> str | None:
    """The layers directory to mount (created if needed), or ``None`` when it cannot be made:
    then only Versions without requirements run (a Version with them fails to import, saying so)."""
    try:
        return package_layers.prepare(package_config.current().package_dir)
    except (OSError, ValueError):
        logger.warning("the package layers directory cannot be prepared; no layer is mounted", exc_info=True)
        return None


class Zygote:
    """Client (and, in the starting process, owner) of one fork-server process.

    ``python`` is the interpreter to run (default ``sys.executable``); ``child_stderr`` keeps the
    children's stderr (tracebacks of the runtime itself) instead of ``/dev/null``, for debugging.
    """

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
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None
        self._dir: str | None = None
        self._control_w: int | None = None
        self.socket_path: str | None = None
        self._reset_client()
        _INSTANCES.add(self)

    def _reset_client(self) -> None:
        self._client: socket.socket | None = None
        self._client_pid: int | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The zygote's pid (``None`` before ``start``)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True if started and, in the owning process, the zygote has not exited."""
        if self._proc is None:
            return False
        if os.getpid() != self._owner_pid:
            return True  # not our child: spawn will tell
        return self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start the zygote and wait until it listens (``ZygoteUnavailable`` after ``timeout``)."""
        if self._proc is not None:
            raise RuntimeError("this Zygote was already started")
        self._dir = tempfile.mkdtemp(prefix="takohost-zygote-")
        self.socket_path = os.path.join(self._dir, "zygote.sock")
        control_r, control_w = os.pipe()
        ready_r, ready_w = os.pipe()
        # The interpreter runs as "takohost-sandbox" with the boot script read from a descriptor:
        # its command line (which every context inherits: sys.orig_argv, /proc/self/cmdline)
        # names no host path, and the SDK's modules are named by their place in a context
        # (takohost/runtime/boot.py).
        boot_fd = os.open(os.path.join(self.policy.sdk_dir, "runtime", "boot.py"), os.O_RDONLY)
        flags, env = _interpreter_flags(self._python)
        command = [
            "takohost-sandbox",
            *flags,
            "-c",
            boot.command(boot_fd),
            "--control-fd",
            str(control_r),
            "--ready-fd",
            str(ready_w),
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
        try:
            self._proc = subprocess.Popen(
                command,
                executable=self._python,
                env=env,
                close_fds=True,
                pass_fds=(control_r, ready_w, boot_fd),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
            try:
                self._proc.stdin.write(settings)  # far below a pipe's buffer: never blocks
                self._proc.stdin.close()
            except OSError:
                pass  # it died at once: the ready pipe says so
        finally:
            os.close(control_r)
            os.close(ready_w)
            os.close(boot_fd)
        self._owner_pid = os.getpid()
        self._control_w = control_w
        try:
            answer = os.read(ready_r, 4096) if _readable(ready_r, timeout) else b""
        finally:
            os.close(ready_r)
        if not answer.startswith(b"ready"):
            self.stop()
            if answer.startswith(b"error "):
                raise ZygoteUnavailable(answer[6:].decode(errors="replace").strip())
            status = self._proc.poll()
            if status is not None:
                raise ZygoteUnavailable(
                    f"the zygote exited with status {status} while starting (see its stderr)"
                )
            raise ZygoteUnavailable(f"the zygote did not become ready within {timeout} s")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the zygote (owner process only; elsewhere just drop this process's connection).

        Closing the control pipe makes the zygote kill every child group and exit.
        """
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
        if os.getpid() != self._owner_pid or self._proc is None:
            return
        if self._control_w is not None:
            os.close(self._control_w)
            self._control_w = None
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _connection(self) -> socket.socket:
        if self._client is None or self._client_pid != os.getpid():
            if self.socket_path is None:
                raise ZygoteUnavailable("the zygote was not started")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
            except OSError as exc:
                sock.close()
                raise ZygoteUnavailable(f"cannot reach the zygote: {exc}") from None
            self._client, self._client_pid = sock, os.getpid()
        return self._client

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
                sock.close()
                self._client = None
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


_INSTANCES: weakref.WeakSet[Zygote] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Never share a zygote connection (or a lock possibly held at fork time) with the parent.
    for zygote in list(_INSTANCES):
        zygote._reset_client()


os.register_at_fork(after_in_child=_after_fork_in_child)

_default: Zygote | None = None
_default_lock = threading.Lock()


def get_zygote() -> Zygote:
    """The process-wide zygote, started on first use (and restarted by its owner if it died).
    A process forked after it was started reuses it through a new connection."""
    global _default
    with _default_lock:
        if _default is None or not _default.running:
            if _default is not None:
                _default.stop()
            _default = Zygote()
            _default.start()
            atexit.register(_default.stop)
        return _default


@dataclass(frozen=True)
class ValidationOutcome:
    """Result of validating a Version's code (docs/spec/worker-forms.md#wf-version).

    ``ok`` with ``workflow_classes`` (sorted names) and ``handlers`` (``("scheduled",)`` or
    ``()``); otherwise ``message`` (the traceback's last line, or what went wrong).
    """

    ok: bool
    workflow_classes: tuple[str, ...] = ()
    handlers: tuple[str, ...] = ()
    message: str | None = None


def validate_version(
    *,
    zygote: Zygote,
    main_module: str,
    modules: dict[str, str],
    time_limit_seconds: float = 10.0,
    space: str | None = None,
    packages: str | None = None,
) -> ValidationOutcome:
    """Import ``main_module`` in a fresh child with a time limit and report what it exports
    (``packages``: the name of the Version's package layer, put on its ``sys.path``).

    Never raises for anything the code does: an import error, ``sys.exit`` at import, a crash
    (``os._exit``, a signal) and a time-out all become ``ok=False`` with a message. Raises
    ``ZygoteUnavailable`` only when no child could be started.
    """
    job: dict[str, Any] = {
        "kind": "validate",
        "mainModule": main_module,
        "modules": modules,
        "vars": {},
        "bindings": [],
    }
    if packages is not None:
        job["packages"] = packages
    try:
        handle = zygote.spawn(job, space=space)
    except (ChildGone, TimeoutError) as exc:
        return ValidationOutcome(ok=False, message=f"the validation process failed to start: {exc}")
    with handle:
        try:
            message = protocol.check_child_message(handle.recv(timeout=time_limit_seconds))
            handle.kill_and_wait()
            for record in handle.finish_egress():  # a validation has no logs: the worker's log has them
                logger.info("validation %s", egress_client.describe(record), extra={"space": space})
        except TimeoutError:
            return ValidationOutcome(
                ok=False, message=f"importing {main_module} did not finish within {time_limit_seconds:g} s"
            )
        except ChildGone:
            return ValidationOutcome(
                ok=False,
                message=f"the process importing {main_module} exited without a result (os._exit or a crash)",
            )
        except protocol.ProtocolError as exc:
            return ValidationOutcome(ok=False, message=f"the validation process broke the protocol: {exc}")
    if message["op"] == "validated":
        return ValidationOutcome(
            ok=True, workflow_classes=tuple(message["workflowClasses"]), handlers=tuple(message["handlers"])
        )
    if message["op"] == "import_error":
        return ValidationOutcome(ok=False, message=message["message"])
    return ValidationOutcome(ok=False, message=f"unexpected validation answer {message['op']!r}")
