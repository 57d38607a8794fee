"""The sandbox child: process hygiene after fork, its channel to the parent, and the three jobs
(``validate``, ``workflow``, ``scheduled``). See ``PROTOCOL.md`` for the messages.

Life of a child (forked by ``takohost.runtime.zygote``; ``run_forked`` never returns):

1. hygiene, done ahead of demand (the zygote keeps a few forked children waiting): ``setsid()``,
   ``PR_SET_PDEATHSIG(SIGKILL)`` (dies with the zygote), default signal dispositions, every
   descriptor closed except 0/1/2 (``/dev/null``) and the link to the zygote, empty environment
   but ``PATH``/``LANG``;
2. isolation (``isolation.Forker.enter``): the child, PID 1 of its own PID namespace, joins a
   copy of the minimal read-only root with a private ``/proc`` and scratch ``/tmp`` (the working
   directory) and its own network, IPC and UTS namespaces, drops to its own uid with no
   capabilities and ``no_new_privs`` under a seccomp filter, sets the limits and narrows
   ``sys.path``;
3. the zygote hands over the channel descriptor (it becomes fd 3, replacing the link); the child
   sends ``hello {pid}`` and starts its reader thread, which reads one ``job`` frame (so a child
   spawned ahead of its job is completely ready when the job arrives);
4. the reader thread routes the parent's answers to the waiting call and watches the parent: EOF
   on the channel, or no frame for longer than ``watchdogSeconds`` → the child exits, and with it
   every process of its PID namespace (DESIGN "Terminate and delete": a child whose parent stops
   answering kills itself);
5. the Version's ``modules`` are installed from memory (``SourceModules``) and ``mainModule`` is
   imported fresh (CONTRACT §4.1), then the job runs;
6. after its final message the child exits: no ``finally:``, ``atexit`` or leftover
   thread/task/process of user code runs afterwards (seed 000: stop before publishing).

Standard library and ``takohost`` only: this runs user code.
"""

from __future__ import annotations

import _signal
import _thread
import asyncio
import base64
import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import marshal
import os
import queue
import select
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import Any, NoReturn

from takohost.domain import documents, identifiers
from takohost.runtime import bindings, capture, isolation, protocol, step, tracebacks

__all__ = [
    "Channel",
    "SourceModules",
    "die",
    "prctl",
    "prepare",
    "run_forked",
    "run_job",
    "set_pdeathsig",
    "warm_up",
]

CHANNEL_FD = 3
VIRTUAL_ROOT = "/takohost/version"
JOB_TIMEOUT_SECONDS = 60.0
_RECV_BYTES = 1 << 16  # below malloc's mmap threshold: no mmap/munmap per read
# Top-level names a Version's modules may not replace: the SDK and runtime, the running main
# module, the codec registry (imported lazily by the interpreter) and built-in modules. Any other
# name shadows an already imported module of the same name, as a script's directory would.
RESERVED_MODULES = frozenset({"takohost", "__main__", "encodings"}) | frozenset(sys.builtin_module_names)

_PR_SET_PDEATHSIG = 1
_libc: Any = None


def prepare() -> None:
    """Load what the child needs from C before forking (called once in the zygote)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    """``prctl(option, value, 0, 0, 0)`` via libc; ``OSError`` if the kernel refuses."""
    prepare()
    if _libc.prctl(int(option), int(value), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def set_pdeathsig(sig: int) -> None:
    """``PR_SET_PDEATHSIG``: the kernel sends ``sig`` when the thread that forked us dies."""
    prctl(_PR_SET_PDEATHSIG, sig)


def die() -> NoReturn:
    """Kill the own process group and exit now (as PID 1 of the context's PID namespace, the exit
    also kills every process left in the namespace, whatever its group or session)."""
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(137)


# ---------------------------------------------------------------------------------------------
# Process hygiene


def run_forked(
    *,
    link_fd: int,
    root: str,
    zygote_pid: int,
    forker: isolation.Forker,
    keep_stderr: bool = False,
) -> NoReturn:
    """Entry point in a freshly forked child; never returns (every path ends in ``die``).

    The child is forked ahead of demand (the zygote keeps a small pool): it cleans itself up,
    enters its sandbox (``forker.isolated``: it is PID 1 of its own PID namespace, see
    ``isolation.Forker.enter``), then waits on ``link_fd`` (its socket to the zygote) for the
    channel descriptor of its parent. ``root`` is the zygote's directory for the working
    directories of children without isolation (``mode == "none"``).
    """
    try:
        _harden(link_fd=link_fd, zygote_pid=zygote_pid, keep_stderr=keep_stderr, forker=forker)
        if forker.isolated:
            forker.enter()
        else:
            _enter_workdir(root)
        _forget_the_zygote_thread()
        # Everything else a context needs is made while this pre-spawned child waits, so that
        # none of it is on a job's path: the output capture (pipes, streams, its thread; muted
        # until the job) and the reader thread, which receives the channel, says hello and reads
        # the job itself.
        sink = capture.install()
        channel = Channel(None, buffer=protocol.FrameBuffer(), watchdog_seconds=None)
        channel.start(expect_job=True, connect=_connect)
        run_job(channel.job(), channel, sink=sink)
    except BaseException:  # noqa: BLE001 - nothing may escape into the zygote's stack
        if keep_stderr:
            traceback.print_exc()
    die()


_DEFAULT_SIGNALS = tuple(
    int(sig)
    for sig in (
        signal.SIGCHLD,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
    )
)


def _harden(*, link_fd: int, zygote_pid: int, keep_stderr: bool, forker: isolation.Forker) -> None:
    os.setsid()
    set_pdeathsig(signal.SIGKILL)
    # The zygote died before PDEATHSIG was armed (in its own PID namespace the child sees its
    # parent as pid 0; there a dead zygote shows as EOF on the link instead).
    if not forker.isolated and os.getppid() != zygote_pid:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    # The C module's functions: the signal module's enum conversions cost a fresh child about
    # 0.2 ms of copy-on-write faults.
    for sig in _DEFAULT_SIGNALS:
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
    if link_fd != CHANNEL_FD:
        os.dup2(link_fd, CHANNEL_FD, inheritable=False)
    keep = sorted(fd for fd in (forker.template_fd, forker.pidns_fd) if fd > CHANNEL_FD)
    low = CHANNEL_FD + 1
    for fd in keep:  # the forker's descriptors: enter() closes them
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1) if keep_stderr else (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    # The environment is the zygote's, isolation.CONTEXT_ENV (zygote.main): resetting it here
    # cost every child about 0.4 ms of os.environ's Python code in copy-on-write faults.
    sys.argv = [""]


def _forget_the_zygote_thread() -> None:
    """``threading`` records the main thread's native id once, in the zygote: there it would tell
    tenant code the zygote's pid on the host (``threading.main_thread().native_id``). Here it is
    the child's own."""
    main = threading.main_thread()
    if hasattr(main, "_native_id"):
        main._native_id = threading.get_native_id()


def _enter_workdir(children_dir: str) -> None:
    """``mode == "none"``: a fresh empty working directory (the zygote removes it afterwards)."""
    workdir = os.path.join(children_dir, str(os.getpid()))
    try:
        os.mkdir(workdir, 0o700)
    except FileExistsError:  # never inherit another context's files
        shutil.rmtree(workdir)
        os.mkdir(workdir, 0o700)
    os.chdir(workdir)


def _connect() -> socket.socket:
    """The channel from the zygote link (:func:`_receive_channel`), after saying ``hello`` on it."""
    sock = _receive_channel()
    protocol.write_frame(sock, {"op": "hello", "pid": os.getpid(), "protocol": protocol.PROTOCOL_VERSION})
    return sock


def _receive_channel() -> socket.socket:
    """Wait on the zygote link (fd 3) for the channel descriptor; it replaces the link as fd 3."""
    link = socket.socket(fileno=CHANNEL_FD)
    _, fds, _, _ = socket.recv_fds(link, 16, 1)
    link.detach()
    if len(fds) != 1:
        die()
    os.dup2(fds[0], CHANNEL_FD, inheritable=False)  # closes the link
    os.close(fds[0])
    sock = socket.socket(fileno=CHANNEL_FD)
    sock.setblocking(True)
    return sock


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 1024)
    except (ValueError, OSError):
        return 65536


# ---------------------------------------------------------------------------------------------
# Channel


class Channel:
    """The child's end of the channel: requests from user-code threads, a reader thread, the
    watchdog. ``watchdog_seconds`` ``None`` disables the watchdog (EOF still kills)."""

    def __init__(
        self, sock: socket.socket | None, *, buffer: protocol.FrameBuffer, watchdog_seconds: object
    ) -> None:
        self._sock = sock
        self._buffer = buffer
        self._watchdog = float(watchdog_seconds) if type(watchdog_seconds) in (int, float) else None
        self._replies: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._closed = False
        self._last_seen = time.monotonic()
        #: The log sink of tenant output (``capture.install``), flushed before every other frame.
        self.capture: capture.Sink | None = None

    def start(self, *, expect_job: bool = False, connect: Callable[[], socket.socket] | None = None) -> None:
        """Start the reader/watchdog thread. With ``connect`` (a channel made without a socket)
        the thread first takes its socket from ``connect()``; any failure there kills the child.
        With ``expect_job`` it then reads the ``job`` frame (``job()`` returns it): EOF, any other
        frame, a non-ping frame in the same read, or ``JOB_TIMEOUT_SECONDS`` without a job kills
        the child; the job's ``watchdogSeconds`` then arms the watchdog. (A bare ``_thread``: a
        ``threading.Thread`` costs a fresh child about 0.5 ms more CPU, ``bench.sandbox_bench``.)"""
        _thread.start_new_thread(self._read_loop, (expect_job, connect))

    def job(self) -> dict[str, Any]:
        """The ``job`` frame read by the reader thread (blocks until it arrived)."""
        return self._replies.get()

    def send(self, message: dict[str, Any]) -> None:
        """Write one frame; any failure kills the child. Blocks forever once a final was sent.
        Buffered tenant output goes first (``capture.Sink.before_send``)."""
        if self.capture is not None:
            self.capture.before_send(final=message.get("op") in protocol.FINAL_OPS)
        self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        """Write one frame as it is (the log sink's way out)."""
        with self._send_lock:
            if self._closed:
                threading.Event().wait()
            try:
                protocol.write_frame(self._sock, message)
            except (OSError, protocol.ProtocolError):
                die()
            if message.get("op") in protocol.FINAL_OPS:
                self._closed = True

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` and return the parent's next non-ping frame."""
        with self._request_lock:
            self.send(message)
            return self._replies.get()

    def final(self, message: dict[str, Any]) -> NoReturn:
        """Send the last message of this child, then kill the process group."""
        self.send(message)
        die()

    def fatal(self, message: str) -> NoReturn:
        """The parent sent something the protocol does not allow here: stop at once."""
        die()

    def _read_loop(self, expect_job: bool, connect: Callable[[], socket.socket] | None) -> None:
        try:
            if connect is not None:
                self._sock = connect()
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLIN)
            if expect_job:
                self._read_job(poller)
            while True:
                timeout_ms = None
                if self._watchdog is not None:
                    remaining = self._last_seen + self._watchdog - time.monotonic()
                    timeout_ms = max(0.0, remaining * 1000)
                if not poller.poll(timeout_ms):
                    # Die only when nothing arrived: a starved reader thread can wake after the
                    # deadline with pings already queued in the socket (poll(0) sees them first).
                    if self._watchdog_expired():
                        die()
                    continue
                data = self._sock.recv(_RECV_BYTES)
                if not data:
                    die()
                self._last_seen = time.monotonic()
                for message in self._buffer.feed(data):
                    if message["op"] != "ping":
                        self._replies.put(message)
        except BaseException:  # noqa: BLE001 - a broken channel or frame: the parent is gone or lying
            die()

    def _watchdog_expired(self) -> bool:
        """True when no frame arrived for ``watchdog`` seconds (never without a watchdog)."""
        return self._watchdog is not None and time.monotonic() - self._last_seen >= self._watchdog

    def _read_job(self, poller: select.poll) -> None:
        """Wait for the ``job`` frame (pings may share its read), queue it and arm the watchdog."""
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                die()
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                die()
            messages = self._buffer.feed(data)
            if messages:
                job = messages[0]
                if job.get("op") != "job":
                    die()
                watchdog = job.get("watchdogSeconds")
                self._watchdog = float(watchdog) if type(watchdog) in (int, float) else None
                self._last_seen = time.monotonic()
                self._replies.put(job)
                # A heartbeat ping may share the job's read (the pinger can start right after the
                # job was sent); any other frame before the child asked for one is a protocol error.
                if any(message["op"] != "ping" for message in messages[1:]):
                    die()
                return


# ---------------------------------------------------------------------------------------------
# The Version's modules, imported from memory


class SourceModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """A finder/loader serving a Version's ``modules`` (relative path → source text) from memory.

    ``"main.py"`` is module ``main``; ``"pkg/__init__.py"`` is package ``pkg``; ``"pkg/mod.py"`` is
    ``pkg.mod`` (a directory without ``__init__.py`` still works as an empty package).
    ``__file__`` is the virtual path ``/takohost/version/<path>``; tracebacks show the source.
    Raises ``ImportError`` for a path that is not a module path (CONTRACT §3.2) or that would
    replace a built-in module or ``takohost``.
    """

    def __init__(self, modules: dict[str, str], code: object = None) -> None:
        #: The job's compiled modules (module path → :func:`code_blob`; PROTOCOL.md "Compiled
        #: modules"); a blob that does not load is ignored and the source compiled instead.
        self._code: dict = code if type(code) is dict else {}
        #: Module path → the code object compiled here from source (for the ``code`` frame).
        self.compiled: dict[str, types.CodeType] = {}
        self._entries: dict[str, tuple[str, str, bool]] = {}
        for path, source in modules.items():
            if (
                type(path) is not str
                or identifiers.MODULE_NAME_RE.match(path) is None
                or type(source) is not str
            ):
                raise ImportError(f"invalid module path {protocol.safe_text(path, limit=300)!r}")
            parts = path[: -len(".py")].split("/")
            if parts[0] in RESERVED_MODULES:
                raise ImportError(f"module {parts[0]!r} is reserved by the host")
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
                if not parts:
                    raise ImportError("a top-level __init__.py is not a module")
            self._entries[".".join(parts)] = (f"{VIRTUAL_ROOT}/{path}", source, is_package)
            for depth in range(1, len(parts)):
                package = ".".join(parts[:depth])
                virtual = f"{VIRTUAL_ROOT}/{'/'.join(parts[:depth])}/__init__.py"
                self._entries.setdefault(package, (virtual, "", True))

    @staticmethod
    def module_name(path: str) -> str:
        """The dotted module name of a module path (``"pkg/mod.py"`` → ``"pkg.mod"``)."""
        parts = path[: -len(".py")].split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def install(self) -> None:
        """Put the finder first and forget any already-imported module of the same names."""
        tops = {name.split(".")[0] for name in self._entries}
        # Only the names already imported are looked for: listing every module name would write
        # to the page of each (reference counts), about 0.3 ms of copy-on-write faults in a
        # freshly forked child. A submodule is never imported without its top-level package.
        for top in tops:
            if top in sys.modules:
                prefix = top + "."
                for loaded in [name for name in sys.modules if name == top or name.startswith(prefix)]:
                    del sys.modules[loaded]
        # No importlib.invalidate_caches(): this finder is first on sys.meta_path and keeps no
        # cache, and no file appears on sys.path for the Version's modules.
        sys.meta_path.insert(0, self)

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        """Spec for one of the Version's modules, ``None`` for anything else."""
        entry = self._entries.get(fullname)
        if entry is None:
            return None
        virtual, _, is_package = entry
        spec = importlib.util.spec_from_loader(fullname, self, origin=virtual, is_package=is_package)
        assert spec is not None
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [virtual.rsplit("/", 1)[0]]
        return spec

    def load(self, fullname: str) -> Any:
        """Import top-level module ``fullname`` of the Version as ``importlib.import_module``
        would (``importlib.util.module_from_spec`` of the same spec, the same ``sys.modules``
        entry, removed again when its code raises; the result is what ``sys.modules`` holds after
        its code ran), without the import system's locks and searches: in a freshly forked child
        they cost about 0.2 ms (a microbenchmark of 300 forks). Raises what the module's code
        raises, or ``ImportError`` for a name that is not one of the Version's top-level
        modules."""
        spec = self.find_spec(fullname)
        if spec is None or "." in fullname:
            raise ImportError(f"no top-level module {fullname!r} in this Version", name=fullname)
        module = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = module
        try:
            self.exec_module(module)
        except BaseException:
            sys.modules.pop(fullname, None)
            raise
        return sys.modules.get(fullname, module)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """Default module creation."""
        return None

    def exec_module(self, module: Any) -> None:
        """Run the module's code in its namespace: what :meth:`compile_all` compiled, else the
        job's compiled code of it when it loads (and names this module's virtual file), else the
        source compiled here."""
        virtual, source, _ = self._entries[module.__spec__.name]
        path = virtual[len(VIRTUAL_ROOT) + 1 :]
        code = self.compiled.get(path) or self._loaded(path, virtual)
        if code is None:
            code = compile(source, virtual, "exec", dont_inherit=True)
            if source:
                self.compiled[path] = code
        exec(code, module.__dict__)  # noqa: S102

    def _loaded(self, path: str, virtual: str) -> types.CodeType | None:
        code = code_of(self._code.get(path))
        return code if code is not None and code.co_filename == virtual else None

    def compile_all(self) -> None:
        """Compile every module with source into :attr:`compiled` now (one that does not compile
        is left for its import to report, as before)."""
        for virtual, source, _ in self._entries.values():
            path = virtual[len(VIRTUAL_ROOT) + 1 :]
            if source and path not in self.compiled:
                try:
                    self.compiled[path] = compile(source, virtual, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    continue

    def code_frame(self, *, limit: int) -> dict[str, Any] | None:
        """The ``code`` frame of what was compiled here (``None``: nothing, or more than ``limit``
        base64 characters in all)."""
        if not self.compiled:
            return None
        blobs = {path: code_blob(code) for path, code in self.compiled.items()}
        if sum(len(blob) for blob in blobs.values()) > limit:
            return None
        return {"op": "code", "modules": blobs}

    def get_source(self, fullname: str) -> str:
        """The module's source text (used by ``linecache`` for tracebacks)."""
        entry = self._entries.get(fullname)
        if entry is None:
            raise ImportError(f"no module {fullname!r} in this Version", name=fullname)
        return entry[1]

    def is_package(self, fullname: str) -> bool:
        """True for ``__init__.py`` modules and implicit package directories."""
        entry = self._entries.get(fullname)
        if entry is None:
            raise ImportError(f"no module {fullname!r} in this Version", name=fullname)
        return entry[2]


def code_blob(code: types.CodeType) -> str:
    """A compiled module as frames carry it: base64 of this interpreter's magic number followed by
    the ``marshal`` data (PROTOCOL.md "Compiled modules")."""
    return base64.b64encode(importlib.util.MAGIC_NUMBER + marshal.dumps(code)).decode("ascii")


def code_of(blob: object) -> types.CodeType | None:
    """The code object of a :func:`code_blob`, or ``None`` for anything that is not one of this
    interpreter's (another magic number, bad base64 or marshal data, not a code object)."""
    if type(blob) is not str:
        return None
    try:
        raw = base64.b64decode(blob, validate=True)
        magic = importlib.util.MAGIC_NUMBER
        if not raw.startswith(magic):
            return None
        code = marshal.loads(raw[len(magic) :])
    except Exception:  # noqa: BLE001 - whatever it is, the source is compiled instead
        return None
    return code if type(code) is types.CodeType else None


def import_version(
    job: dict[str, Any], *, compiled: Callable[[SourceModules], None] | None = None
) -> tuple[Any, SourceModules]:
    """Install the job's ``modules`` (with its compiled ``code``, if any) and import
    ``mainModule`` fresh: ``(module, finder)``; errors propagate. With ``compiled``, every
    module is compiled first and ``compiled(finder)`` called before any of the Version's code
    runs (what it then sees in ``finder.compiled`` is the source's, whatever that code does)."""
    finder = SourceModules(job.get("modules") or {}, job.get("code"))
    main = job.get("mainModule")
    if type(main) is not str or main not in (job.get("modules") or {}):
        raise ImportError(f"mainModule {protocol.safe_text(main, limit=300)!r} is not one of the modules")
    if compiled is not None:
        finder.compile_all()
        compiled(finder)
    finder.install()
    name = SourceModules.module_name(main)
    if "." in name:  # its packages first: the import system's way
        return importlib.import_module(name), finder
    return finder.load(name), finder


def import_main(job: dict[str, Any]) -> Any:
    """:func:`import_version`'s module."""
    return import_version(job)[0]


_WARM_UP_MODULE = "_takohost_warm_up"
_WARM_UP_SOURCE = """
class Warm:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        first = step.do("s0", lambda: {"n": 0})
        for i in range(1, 3):
            step.do(f"s{i}", lambda: {"n": i})
        return {"first": first, "event": event}
"""


class _WarmUpChannel:
    """A channel answering like a parent would (``run_effect`` then ``resolve``), in memory."""

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        protocol.FrameBuffer().feed(protocol.encode_frame(message))
        if message["op"] == "do":
            reply: dict[str, Any] = {"op": "run_effect", "attempt": 1}
        else:
            reply = {"op": "resolve", "result": message.get("result")}
        return protocol.FrameBuffer().feed(protocol.encode_frame(reply))[0]

    def final(self, message: dict[str, Any]) -> NoReturn:
        raise RuntimeError("no final message in the warm-up")

    def fatal(self, message: str) -> NoReturn:
        raise RuntimeError(message)


def warm_up(rounds: int = 16) -> None:
    """Run the runtime's per-context code paths ``rounds`` times in this process, with a module of
    its own (no user code, nothing left behind: the warm-up module and its finder are removed).

    Called once in the zygote before it freezes its heap, so every forked child starts with this
    code already quickened and specialised instead of warming it up again in each context. Only
    the interpreter's caches are shared this way; no module state of a Version ever exists in the
    zygote.
    """
    channel = _WarmUpChannel()
    job = {
        "op": "job",
        "kind": "workflow",
        "modules": {f"{_WARM_UP_MODULE}.py": _WARM_UP_SOURCE},
        "mainModule": f"{_WARM_UP_MODULE}.py",
        "className": "Warm",
        "vars": {"A": {"b": [1, 2.5, "c", None, True]}},
        "bindings": [],
        "event": {"instanceId": "warm-up"},
        "watchdogSeconds": 10.0,
    }
    saved_meta_path = list(sys.meta_path)
    try:
        for _ in range(rounds):
            received = protocol.FrameBuffer().feed(protocol.encode_frame(job))[0]
            module = import_main(received)
            env = bindings.make_env(variables=received["vars"], bindings=[], channel=channel)
            value = module.Warm(env).run(received["event"], step.Step(step.Context(channel)))
            documents.canonical_document(value, allow_none=True)
            protocol.encode_frame({"op": "run_returned", "output": value})
            sys.meta_path[:] = saved_meta_path
            sys.modules.pop(_WARM_UP_MODULE, None)
    finally:
        sys.meta_path[:] = saved_meta_path
        sys.modules.pop(_WARM_UP_MODULE, None)


def last_traceback_line(exc: BaseException) -> str:
    """The last line of ``exc``'s formatted traceback (CONTRACT §3.2 import errors), followed by
    the Version file and line where it happened when that is one of the Version's modules:
    ``"NameError: name 'x' is not defined (main.py, line 3)"``."""
    try:
        lines = "".join(traceback.format_exception(exc)).strip().splitlines()
        text = lines[-1] if lines else step.exception_text(exc)
    except BaseException:  # noqa: BLE001 - a user __str__ may raise
        text = step.exception_text(exc)
    where = tracebacks.location(tracebacks.tenant_frames(exc))
    if where is not None and not text.endswith(f"({where})"):
        text = f"{text} ({where})"
    return protocol.safe_text(text)


# ---------------------------------------------------------------------------------------------
# Jobs


def run_job(job: dict[str, Any], channel: Channel, *, sink: capture.Sink | None = None) -> NoReturn:
    """Run one job and end the child with its final message. ``sink`` is the muted output capture
    installed while the child waited (``None``: installed here when the job captures)."""
    kind = job.get("kind")
    if kind in ("workflow", "scheduled"):
        if sink is None:
            sink = capture.install()
        sink.arm(channel._write)
        channel.capture = sink
    elif sink is not None:
        sink.discard()
    if kind == "validate":
        _run_validate(job, channel)
    elif kind == "workflow":
        _run_workflow(job, channel)
    elif kind == "scheduled":
        _run_scheduled(job, channel)
    die()


def _run_validate(job: dict[str, Any], channel: Channel) -> NoReturn:
    try:
        module = import_main(job)
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import is an import error too
        channel.final({"op": "import_error", "message": last_traceback_line(exc)})
    classes = []
    for name, value in list(vars(module).items()):
        try:
            if is_workflow_class(value):
                classes.append(name)
        except BaseException:  # noqa: BLE001 - a metaclass may raise anything
            continue
    try:
        handlers = ["scheduled"] if callable(getattr(module, "scheduled", None)) else []
    except BaseException:  # noqa: BLE001
        handlers = []
    channel.final({"op": "validated", "workflowClasses": sorted(classes), "handlers": handlers})


def is_workflow_class(value: object) -> bool:
    """CONTRACT §4.2: a class, constructible with one argument (as far as its signature tells),
    whose ``run`` is callable."""
    if not isinstance(value, type) or not callable(getattr(value, "run", None)):
        return False
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return True  # no introspectable signature: constructing will tell
    try:
        signature.bind(None)
    except TypeError:
        return False
    return True


def _run_failed(
    channel: Channel,
    *,
    phase: str,
    exc: BaseException | None = None,
    message: str = "",
    frames_of: BaseException | None = None,
) -> NoReturn:
    text = step.exception_text(exc) if exc is not None else message
    final: dict[str, Any] = {"op": "run_failed", "reason": "run_threw", "message": text, "phase": phase}
    frames = tracebacks.tenant_frames(exc or frames_of) if (exc or frames_of) is not None else []
    if frames:
        final["traceback"] = frames
    channel.final(final)


def _send_code(channel: Channel, finder: SourceModules) -> None:
    """The ``code`` frame, before any of the Version's code runs (PROTOCOL.md "Compiled
    modules"): the parent keeps it for this Version's next contexts."""
    frame = finder.code_frame(limit=protocol.CODE_MAX_CHARS)
    if frame is not None:
        channel.send(frame)


def _run_workflow(job: dict[str, Any], channel: Channel) -> NoReturn:
    send_code = (lambda finder: _send_code(channel, finder)) if job.get("wantCode") is True else None
    try:
        module, _ = import_version(job, compiled=send_code)
    except BaseException as exc:  # noqa: BLE001
        _run_failed(channel, phase="import", message=last_traceback_line(exc), frames_of=exc)
    class_name = job.get("className")
    cls = getattr(module, class_name, None) if type(class_name) is str else None
    if not isinstance(cls, type) or not callable(getattr(cls, "run", None)):
        _run_failed(
            channel,
            phase="construct",
            message=f"no workflow class {protocol.safe_text(class_name)!r} in the main module",
        )
    env = bindings.make_env(
        variables=job.get("vars") or {}, bindings=job.get("bindings") or [], channel=channel
    )
    try:
        instance = cls(env)
        run = instance.run
    except BaseException as exc:  # noqa: BLE001
        _run_failed(channel, phase="construct", exc=exc)
    context = step.Context(channel)
    event = job.get("event") or {}
    if inspect.iscoroutinefunction(run):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(_drive_async(run, event, step.AsyncStep(context), context))
        die()  # _drive_async never returns normally
    try:
        value = run(event, step.Step(context))
    except BaseException as exc:  # noqa: BLE001
        _finish_run(context, raised=exc)
    _finish_run(context, value=value)


async def _drive_async(
    run: Any, event: dict[str, Any], step_object: step.AsyncStep, context: step.Context
) -> None:
    # The run is awaited directly (not as a task) and finished inside this coroutine, so no other
    # task of the loop gets a turn between run settling and the child's final message.
    try:
        value = await run(event, step_object)
    except BaseException as exc:  # noqa: BLE001
        _finish_run(context, raised=exc)
    _finish_run(context, value=value)


def _finish_run(
    context: step.Context, *, value: object = None, raised: BaseException | None = None
) -> NoReturn:
    """Send ``run_returned`` / ``run_failed`` (or ``mismatch`` if a step is unsettled), then die."""
    unsettled = context.unsettled()
    if unsettled is not None:
        context.mismatch(f"run settled while {unsettled} was unsettled")
    channel = context.channel
    if raised is not None:
        genuine = context.genuine_step_failed(raised)
        if genuine is not None:
            message, step_name = genuine
            channel.final(
                {
                    "op": "run_failed",
                    "reason": "step_failed",
                    "message": message,
                    "phase": "run",
                    "step": step_name,
                }
            )
        _run_failed(channel, phase="run", exc=raised)
    if inspect.isawaitable(value):
        channel.final(
            {
                "op": "run_failed",
                "reason": "run_threw",
                "phase": "run",
                "message": "TypeError: run returned an awaitable; declare it with async def",
            }
        )
    try:
        documents.canonical_document(value, allow_none=True)
    except (documents.InvalidDocument, documents.DocumentTooLargeError) as exc:
        channel.final(
            {
                "op": "run_failed",
                "reason": "run_threw",
                "phase": "run",
                "message": protocol.safe_text(
                    f"{type(exc).__name__}: run returned a value that is not a document: {exc}"
                ),
            }
        )
    channel.final({"op": "run_returned", "output": value})


class ScheduledContext:
    """``ctx`` of ``scheduled(event, env, ctx)`` (CONTRACT §4.6).

    ``wait_until(work)``: ``work`` is an awaitable (started now as a task when a loop runs) or a
    callable (called after the handler returns; an awaitable result is awaited). The delivery
    finishes when all of them have; any failure makes the delivery ``failed``.
    """

    def __init__(self) -> None:
        self._work: list[Any] = []

    def wait_until(self, work: Any) -> None:
        """Keep the delivery open until ``work`` finishes; ``TypeError`` for anything else."""
        if inspect.isawaitable(work):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # a plain handler: no loop runs yet, the awaitable is awaited after it
            else:
                work = asyncio.ensure_future(work)
            self._work.append(work)
        elif callable(work):
            self._work.append(work)
        else:
            raise TypeError(f"wait_until takes an awaitable or a callable, not {type(work).__name__}")

    async def drain(self, failures: list[BaseException]) -> None:
        """Finish every registered piece of work (including work registered meanwhile)."""
        index = 0
        while index < len(self._work):
            work = self._work[index]
            index += 1
            try:
                result = work if inspect.isawaitable(work) else work()
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)


def _run_scheduled(job: dict[str, Any], channel: Channel) -> NoReturn:
    try:
        module = import_main(job)
        handler = getattr(module, "scheduled", None)
    except BaseException as exc:  # noqa: BLE001
        done = {"op": "scheduled_done", "ok": False, "message": last_traceback_line(exc)}
        frames = tracebacks.tenant_frames(exc)
        if frames:
            done["traceback"] = frames
        channel.final(done)
    if not callable(handler):
        channel.final(
            {"op": "scheduled_done", "ok": False, "message": "the main module has no callable scheduled"}
        )
    env = bindings.make_env(
        variables=job.get("vars") or {}, bindings=job.get("bindings") or [], channel=channel
    )
    event = job.get("event") or {}
    ctx = ScheduledContext()
    failures: list[BaseException] = []
    pending: Any = None
    if not inspect.iscoroutinefunction(handler):
        # A plain handler runs outside any event loop (it may use asyncio.run itself).
        try:
            pending = handler(event, env, ctx)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    async def deliver() -> NoReturn:
        try:
            result = handler(event, env, ctx) if inspect.iscoroutinefunction(handler) else pending
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        await ctx.drain(failures)
        if failures:
            text = step.exception_text(failures[0])
            if len(failures) > 1:
                text = f"{text} (and {len(failures) - 1} more failure(s))"
            done: dict[str, Any] = {"op": "scheduled_done", "ok": False, "message": protocol.safe_text(text)}
            frames = tracebacks.tenant_frames(failures[0])
            if frames:
                done["traceback"] = frames
            channel.final(done)
        channel.final({"op": "scheduled_done", "ok": True})

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(deliver())
    die()
