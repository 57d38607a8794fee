"""The fork server ("zygote"): a small pre-started process that forks sandbox children.

Started by ``workers.sandbox.Zygote.start()`` as ``takohost-sandbox -s -P -B -c <code>
--control-fd N --ready-fd N`` (the interpreter under a neutral name, running ``boot.py``, which
names the SDK's modules by their place in a context, then calls :func:`main`) with a scrubbed
environment and only those pipe descriptors; its settings (the socket's path, the
``isolation.policy.Policy``) arrive as JSON on its standard input (``read_settings``), so that no
child finds them in its command line. It imports the standard
library and the SDK only, pre-imports what children commonly need, freezes the GC generations,
and then forks in about 0.4 ms instead of the 1.7–5 ms a fork of a Celery worker costs
(docs/performance.md). A child forgets the zygote's pids and paths (``_forget_in_child``).

Requests (one Unix stream connection per client process, see PROTOCOL.md "Zygote"): a frame
``{"op": "spawn"}`` carrying one end of a fresh ``socketpair`` as SCM_RIGHTS. The zygote hands
that descriptor to a child forked ahead of demand (``child.run_forked``) and answers
``{"op": "spawned", "pid": N}`` with a pidfd of the process that runs the tenant's code attached
(and, where the host has a freezer, a directory descriptor of the context's freezer cgroup: the
parent's stop proof, ``isolation.cgroups.freeze``); or ``{"op": "error", "message"}``.

Isolation (``isolation``; ``TAKOHOST_SANDBOX_ISOLATION``, default ``namespaces``): each child
is forked by ``isolation.forking.Forker`` as PID 1 of a PID namespace of its own and enters a minimal
read-only root (a private copy of a template mount namespace the zygote builds once) with its
own network, IPC and UTS namespaces and identity. The child's pidfd becoming readable proves the
whole namespace is empty: the kernel kills every process of a PID namespace when its init dies
and reports the init's exit only after them. At start the zygote probes that this works and
refuses to serve otherwise (it writes ``error <reason>`` on the ready pipe). With
``mode == "none"`` (the documented unsafe opt-out) the child runs in the host's namespaces, in a
process group of its own.

Reaping: SIGCHLD only wakes the loop (``signal.set_wakeup_fd``); the loop peeks at exited
children with ``waitid(WNOWAIT)``. Before it reaps a child it SIGKILLs it through its pidfd and
its process group. The zygote is a child subreaper (orphans of ``mode == "none"`` children are
reparented to it and reaped too).

Lifetime: the zygote exits (killing every child) on EOF of the control pipe, i.e. when every
process holding its write end — the starter and processes forked from it — has died; or on
SIGTERM. ``PR_SET_PDEATHSIG`` is deliberately not used here: it fires when the *thread* that
started the zygote exits, which in a threaded worker is not the worker's death. Children do use
it (their parent is the zygote's only thread). The zygote is non-dumpable.

Connections from the zygote's own descendants (sandbox code) are refused (and with namespaces
the socket is not in a context's file system at all).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from takohost.runtime import child, isolation, protocol

__all__ = ["PRELOAD", "ZygoteServer", "main"]

logger = logging.getLogger("takohost.zygote")

_PR_SET_CHILD_SUBREAPER = 36
_MAX_FDS_PER_RECV = 16

# Modules imported once here so that every child gets them for the price of a fork.
PRELOAD = (
    "asyncio",
    "base64",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "functools",
    "hashlib",
    "http.client",
    "inspect",
    "ipaddress",
    "itertools",
    "json",
    "math",
    "random",
    "re",
    "socket",
    "ssl",
    "string",
    "time",
    "traceback",
    "typing",
    "urllib.request",
    "uuid",
    "takohost",
    "takohost.errors",
    "takohost.domain.documents",
    "takohost.domain.egress",
    "takohost.domain.identifiers",
    "takohost.domain.retry",
    "takohost.runtime.bindings",
    "takohost.runtime.egress_hook",
    "takohost.runtime.step",
)


class _Connection:
    """One client connection: its socket, partial frames and received descriptors."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = protocol.FrameBuffer()
        self.fds: list[int] = []

    def close(self) -> None:
        """Close the socket and any received descriptor not yet used."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()
        self.sock.close()


class ZygoteServer:
    """The zygote's event loop (single-threaded: it forks)."""

    def __init__(
        self,
        *,
        socket_path: str,
        control_fd: int,
        keep_child_stderr: bool,
        forker: isolation.forking.Forker,
        children_dir: str,
        pool_size: int = 2,
    ) -> None:
        self.pid = os.getpid()
        self.pool_size = pool_size
        self.forker = forker
        self.isolated = forker.isolated
        # forked, waiting: (pid, link, pidfd)
        self.idle: list[tuple[int, socket.socket, int]] = []
        self.socket_path = socket_path
        self.keep_child_stderr = keep_child_stderr
        # Namespaces: the (empty) mount point of the template root. None: the parent of each
        # child's working directory.
        self.children_dir = children_dir
        # child pid → its pidfd, kept until the child is reaped (to kill it on shutdown).
        self.leaders: dict[int, int] = {}
        # child pid → the connection it was handed out on, until it is reaped (stopped when that
        # connection drops).
        self.owners: dict[int, _Connection] = {}
        self.stopping = False
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        os.chmod(socket_path, 0o600)
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, self._accept)
        self.control_fd = control_fd
        self.selector.register(control_fd, selectors.EVENT_READ, self._control)
        self.wakeup_r, self.wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_r, False)
        os.set_blocking(self.wakeup_w, False)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, self._wakeup)
        signal.set_wakeup_fd(self.wakeup_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _ignore_signal)  # a Python handler, so the wakeup fd is written
        signal.signal(signal.SIGTERM, self._terminate)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the starter; EOF stops us
        self.connections: dict[int, _Connection] = {}

    # -- loop --------------------------------------------------------------------------------
    def serve(self) -> None:
        """Serve until the control pipe closes or SIGTERM arrives; then stop every child."""
        while not self.stopping:
            # Serve requests first; refill the pool one fork per turn when nothing is waiting.
            short = len(self.idle) < self.pool_size
            for key, _ in self.selector.select(timeout=0 if short else 1.0):
                key.data(key.fileobj)
            self.reap()
            if short and not self.stopping:
                try:
                    self._fork_idle()
                except OSError:  # out of processes or memory: serve on, retry next turn
                    logger.exception("could not fork a sandbox child")
                    time.sleep(0.1)
        self.shutdown()

    def _terminate(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _wakeup(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(fd, 4096)

    def _control(self, fd: int) -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            self.stopping = True

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        peer_pid = _peer_pid(sock)
        if peer_pid is None or self._is_descendant(peer_pid):
            logger.warning("refused a zygote connection from pid %s (a sandbox descendant)", peer_pid)
            sock.close()
            return
        sock.setblocking(False)
        connection = _Connection(sock)
        self.connections[sock.fileno()] = connection
        self.selector.register(sock, selectors.EVENT_READ, self._readable)

    def _is_descendant(self, pid: int) -> bool:
        """True if this zygote is an ancestor of ``pid`` (walks ``/proc/<pid>/stat`` ppids)."""
        for _ in range(64):
            if pid <= 1:
                return False
            if pid == self.pid:
                return True
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                return True  # vanished or unreadable: refuse
            pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        return True

    def _readable(self, sock: socket.socket) -> None:
        connection = self.connections[sock.fileno()]
        try:
            data, fds, _, _ = socket.recv_fds(sock, 65536, _MAX_FDS_PER_RECV)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        connection.fds.extend(fds)
        if not data:
            self._drop(connection)
            return
        try:
            messages = connection.buffer.feed(data)
        except protocol.ProtocolError:
            self._drop(connection)
            return
        for message in messages:
            if connection.sock.fileno() < 0:
                return
            if message.get("op") != "spawn" or not connection.fds:
                self._reply(
                    connection, {"op": "error", "message": "expected spawn with one descriptor"}, None
                )
                continue
            channel_fd = connection.fds.pop(0)
            try:
                self._spawn(connection, channel_fd)
            except OSError as exc:
                logger.exception("could not spawn a sandbox child")
                self._reply(connection, {"op": "error", "message": f"fork failed: {exc}"}, None)

    def _drop(self, connection: _Connection) -> None:
        if connection.sock.fileno() < 0:
            return  # already dropped
        self.selector.unregister(connection.sock)
        self.connections.pop(connection.sock.fileno(), None)
        connection.close()
        # Its client process is gone (or broke the protocol): a context it froze to stop it and
        # could not kill and thaw would stay frozen for good (a frozen task takes no SIGKILL on
        # cgroup v1). Contexts it did not freeze run on (their channels are their own).
        for pid in [pid for pid, owner in self.owners.items() if owner is connection]:
            del self.owners[pid]
            if pid in self.leaders and isolation.cgroups.frozen(self.forker.freezer_fd(pid)):
                self._stop_child(pid)

    def _stop_child(self, pid: int) -> None:
        """Kill child ``pid`` and everything it started, frozen or not: its cgroup is frozen,
        every process in it killed and thawed (so that none runs on, nor stays frozen), then its
        pidfd and group are signalled too."""
        freezer_fd = self.forker.freezer_fd(pid)
        if freezer_fd >= 0:
            isolation.cgroups.freeze(freezer_fd, timeout=1.0)
            with contextlib.suppress(OSError):
                isolation.cgroups.kill_frozen(freezer_fd)
        _kill(self.leaders[pid], pid)
        if freezer_fd >= 0:
            isolation.cgroups.thaw(freezer_fd)

    def _reply(self, connection: _Connection, message: dict[str, Any], fds: list[int] | None) -> bool:
        frame = protocol.encode_frame(message)
        try:
            if not fds:
                connection.sock.sendall(frame)
            else:
                socket.send_fds(connection.sock, [frame], fds)
        except OSError:
            self._drop(connection)
            return False
        return True

    # -- fork and reap -------------------------------------------------------------------------
    def _fork_idle(self) -> None:
        """Fork one child that cleans itself up and waits for a channel (the pool)."""
        parent_link, child_link = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = self.forker.fork()
        if pid == 0:
            try:
                # Only a child without isolation needs the zygote's pid and directory.
                root, zygote_pid = ("", 0) if self.isolated else (self.children_dir, self.pid)
                self._forget_in_child()
                parent_link.detach()
                child.run_forked(
                    link_fd=child_link.detach(),
                    root=root,
                    zygote_pid=zygote_pid,
                    forker=self.forker,
                    keep_stderr=self.keep_child_stderr,
                )
            finally:
                os._exit(70)
        child_link.close()
        # Opened before this (single) thread can reap the child: the pidfd names exactly it.
        pidfd = os.pidfd_open(pid)
        self.leaders[pid] = pidfd
        self.idle.append((pid, parent_link, pidfd))

    def _spawn(self, connection: _Connection, channel_fd: int) -> None:
        try:
            while True:
                if not self.idle:
                    self._fork_idle()
                pid, link, pidfd = self.idle.pop(0)
                try:
                    socket.send_fds(link, [b"C"], [channel_fd])
                except OSError:  # that idle child died; it is reaped in the loop
                    continue
                finally:
                    link.close()
                break
        finally:
            os.close(channel_fd)
        freezer_fd = self.forker.freezer_fd(pid)
        fds = [pidfd] if freezer_fd < 0 else [pidfd, freezer_fd]
        if self._reply(connection, {"op": "spawned", "pid": pid}, fds):
            self.owners[pid] = connection
        else:
            self._stop_child(pid)

    def _forget_in_child(self) -> None:
        """In a new child: detach the zygote's sockets so no object's finaliser ever closes a
        descriptor number the child reuses (the child closes the descriptors itself), and forget
        what tenant code could read in the child's copy of this object: the zygote's pid, its
        other children's (host pids of the next contexts, of any Space) and its paths."""
        self.listener.detach()
        for connection in self.connections.values():
            connection.sock.detach()
        for _, link, _ in self.idle:
            link.detach()
        self.connections.clear()
        self.idle.clear()
        self.leaders.clear()
        self.owners.clear()
        self.pid = 0
        self.socket_path = self.children_dir = ""

    def reap(self) -> None:
        """Reap every exited child; kill its group (and namespace) before reaping it."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            self.owners.pop(pid, None)
            pidfd = self.leaders.pop(pid, None)
            if pidfd is not None:
                _kill(pidfd, pid)  # the unreaped child still reserves the group id
                os.close(pidfd)
                self._forget_idle(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.forker.release(pid)
            if pidfd is not None and not self.isolated:
                _remove_workdir(os.path.join(self.children_dir, str(pid)))

    def _forget_idle(self, pid: int) -> None:
        for entry in self.idle:
            if entry[0] == pid:
                self.idle.remove(entry)
                entry[1].close()
                return

    def shutdown(self) -> None:
        """Kill every child (and what it started), reap them, remove the socket and directory."""
        for pid in list(self.leaders):
            self._stop_child(pid)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        while True:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            pidfd = self.leaders.pop(pid, None)  # type: ignore[arg-type]
            if pidfd is not None:
                os.close(pidfd)
        self.forker.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
        with contextlib.suppress(OSError):  # the starter's private directory, if now empty
            os.rmdir(os.path.dirname(self.socket_path))
        shutil.rmtree(self.children_dir, ignore_errors=True)


def _kill(pidfd: int, pid: int) -> None:
    """SIGKILL a child through its pidfd (with namespaces it is PID 1 of its own PID namespace,
    whose death takes everything in it) and its process group (without namespaces)."""
    with contextlib.suppress(ProcessLookupError, OSError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    _kill_group(pid)


def _remove_workdir(path: str) -> None:
    """Remove a child's working directory: one ``rmdir`` when it is empty (the usual case), else
    the whole tree; a directory already gone is fine."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def _ignore_signal(signum: int, frame: Any) -> None:
    return None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _peer_pid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    except OSError:
        return None
    return int.from_bytes(creds[:4], sys.byteorder, signed=True)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    child.hygiene.prepare()
    try:
        child.jobs.warm_up()
    except Exception:  # noqa: BLE001 - only slower children without it; never a reason not to serve
        logger.exception("the runtime warm-up failed; children start cold")
    # The import finders cache listings of the host's directories on sys.path (site-packages,
    # the checkout). Drop them here, once: a child that freed them would write to thousands of
    # pages it shares with the zygote (copy-on-write faults), and one that kept them would let
    # tenant code read them (gc.get_objects()).
    sys.path_importer_cache.clear()
    gc.collect()
    gc.freeze()  # keep the preloaded objects out of the children's collections (copy-on-write)


def _forget_hidden_modules(hidden: tuple[str, ...]) -> None:
    """Drop from ``sys.modules`` every module loaded from a directory a context does not see
    (``hidden``: the interpreter's own ``site-packages``, covered by an empty mount). ``site``
    runs that directory's ``.pth`` files when the zygote starts, and one may import a package
    (``certifi``, ``_distutils_hack``): every context would inherit it, its files absent, in the
    place of the same package in the Version's pinned layer (``httpx`` would find a
    ``certifi.where()`` that does not exist)."""
    roots = tuple(os.path.realpath(path) + os.sep for path in hidden)
    if not roots:
        return
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        locations = list(getattr(module, "__path__", None) or ())
        for place in [origin, *locations]:
            if isinstance(place, str) and place and os.path.realpath(place).startswith(roots):
                del sys.modules[name]
                break


def _plain_loaders() -> None:
    """Give every SDK module loaded through the boot's finder (``takohost.runtime.boot``) a plain
    loader of its neutral path: the finder's loaders know the SDK's directory on the host, and
    every context inherits each module's ``__loader__`` and ``__spec__.loader``."""
    import importlib.machinery

    plain_type = importlib.machinery.SourceFileLoader
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        loader = getattr(spec, "loader", None)
        if isinstance(loader, plain_type) and type(loader) is not plain_type and spec and spec.origin:
            plain = plain_type(name, spec.origin)
            spec.loader = plain
            module.__loader__ = plain


def _set_subreaper() -> None:
    child.hygiene.prctl(_PR_SET_CHILD_SUBREAPER, 1)


def read_settings(fd: int = 0) -> dict[str, Any]:
    """The zygote's settings, one JSON object read from ``fd`` (its standard input) to EOF:
    ``socket`` (the path to listen on, required), ``policy`` (``isolation.policy.Policy.to_json()``
    text; absent: the defaults), ``keepChildStderr`` (bool), ``poolSize`` (int, default 2) and
    ``packages`` (``takohost.runtime.boot.package_dirs()``: what each context's root copies).
    They come on a pipe, not the command line, because every child inherits the zygote's memory:
    its command line would show tenant code the socket's path (``/proc/self/cmdline``,
    ``sys.orig_argv``). Raises ``ValueError`` for anything else."""
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    settings = json.loads(b"".join(chunks) or b"null")
    if type(settings) is not dict or type(settings.get("socket")) is not str:
        raise ValueError("the zygote's settings are a JSON object with a socket path")
    return settings


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: read the settings (:func:`read_settings`), preload, signal readiness,
    serve."""
    parser = argparse.ArgumentParser(prog="takohost.runtime.zygote")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    settings = read_settings()
    if dict(os.environ) != isolation.policy.CONTEXT_ENV:  # what every child inherits
        os.environ.clear()
        os.environ.update(isolation.policy.CONTEXT_ENV)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    isolation.identity.set_dumpable(False)  # nothing may read the zygote's memory through /proc or ptrace
    _set_subreaper()
    policy = isolation.policy.Policy.from_json(settings["policy"]) if settings.get("policy") else isolation.policy.Policy()
    layout = isolation.mounts.Layout.compute(policy, packages=settings.get("packages"))
    # Where a job's package layer is found: the read-only mount, or (no isolation) the host's directory.
    child.importer.PACKAGES_ROOT = (
        isolation.mounts.PACKAGE_MOUNT if policy.mode == "namespaces" else policy.packages_dir
    )
    children_dir = _make_children_dir()
    try:
        isolation.forking.probe(layout, root=children_dir)
        forker = isolation.forking.Forker(layout, root=children_dir)
    except isolation.syscalls.IsolationUnavailable as exc:
        shutil.rmtree(children_dir, ignore_errors=True)
        message = (
            f"the sandbox cannot isolate tenant code on this machine ({exc}); it needs user, PID, "
            "mount and network namespaces. Set TAKOHOST_SANDBOX_ISOLATION=none to run tenant code "
            "without isolation (unsafe: only for code you trust; see docs/security.md)"
        )
        os.write(args.ready_fd, f"error {message}\n".encode())
        return 78
    _preload()
    if forker.isolated:
        _forget_hidden_modules(layout.hidden)
    _plain_loaders()
    # What a context's code finds as its interpreter: a link in its root to the host's binary
    # (``isolation.mounts.INTERPRETER``), not the host's virtualenv (without isolation, the binary).
    sys.executable = sys._base_executable = (  # type: ignore[attr-defined]
        isolation.mounts.INTERPRETER if forker.isolated else os.readlink("/proc/self/exe")
    )
    server = ZygoteServer(
        socket_path=settings["socket"],
        control_fd=args.control_fd,
        keep_child_stderr=settings.get("keepChildStderr") is True,
        forker=forker,
        children_dir=children_dir,
        pool_size=max(0, int(settings.get("poolSize", 2))),
    )
    os.write(args.ready_fd, b"ready\n")
    os.close(args.ready_fd)
    # Every child is forked from below this frame: nothing of the host in its locals.
    del args, settings, children_dir, policy, layout
    server.serve()
    return 0


def _make_children_dir() -> str:
    """A new private directory under the temporary directory (``tempfile.mkdtemp`` would leave
    its name generator, holding this zygote's pid, in every child's memory)."""
    base = tempfile.gettempdir()
    while True:
        path = os.path.join(base, f"takohost-children-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


if __name__ == "__main__":
    sys.exit(main())
