"""The ``takohost`` command (docs/spec/architecture.md#ar-operating): operate the host from the shell; the server commands
(``api``, ``worker``, ``beat``, ``dev``, ``db``, ``token``) live here, the client commands in
:mod:`host_cli.client_commands`.

Heavy modules (Celery, SQLAlchemy, Flask) are imported inside each command so that
``takohost --help`` stays fast and user code never pays for them.
"""

from __future__ import annotations

import logging
import os

import click

from host_cli import client_commands


def _setup_logging(log_format: str | None = None, level: str = "INFO") -> None:
    """Host log lines on stderr, ``text`` or ``json`` (``--log-format``, ``TAKOHOST_LOG_FORMAT``),
    carrying the fields of the instance they are about (``services.telemetry.logs``)."""
    from services.telemetry import logs

    try:
        logs.setup(fmt=log_format, level=level.upper())
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _serve_metrics(role: str, port: int | None, *, host_state: bool = False) -> None:
    """With a metrics port (``--metrics-port``, ``TAKOHOST_METRICS_PORT``): a fresh multiprocess
    directory for this command's processes and ``GET /metrics`` on that port (docs/operations.md
    "Observability"); nothing without one."""
    from services.telemetry import metrics

    port = _metrics_port(port)
    if port is None:
        return
    metrics.prepare(role)
    try:
        metrics.serve(port, host_state=host_state)
    except OSError as exc:  # e.g. two commands given one port (each command needs its own)
        raise click.ClickException(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from None
    logging.getLogger("takohost.metrics").info(
        "metrics at http://%s:%d/metrics", os.environ.get("TAKOHOST_METRICS_ADDR") or "127.0.0.1", port)


def _metrics_port(value: int | None) -> int | None:
    """``--metrics-port``, else ``TAKOHOST_METRICS_PORT``; a bad variable is a usage error."""
    from services.telemetry import metrics

    try:
        return metrics.port_from_env(value)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _observability_options(fn):  # noqa: ANN001, ANN202 - a click decorator
    """``--log-format`` and ``--metrics-port``, shared by ``api``, ``worker`` and ``beat``."""
    fn = click.option("--metrics-port", type=click.IntRange(min=1, max=65535), default=None,
                      help="Serve Prometheus metrics of this command's processes on this port "
                           "(TAKOHOST_METRICS_ADDR, default 127.0.0.1; unauthenticated; env "
                           "TAKOHOST_METRICS_PORT).")(fn)
    return click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
                        help="Host log lines as text or one JSON object per line (env "
                             "TAKOHOST_LOG_FORMAT; default text).")(fn)


def _host_process() -> None:
    """Mark this host process non-dumpable: no process of the same uid (tenant code included,
    were it ever to run as that uid) can read its memory, environment or descriptors through
    ``/proc`` or ptrace. Inherited by the processes it forks (gunicorn, Celery pool)."""
    from takohost.runtime import isolation

    isolation.identity.set_dumpable(False)


def _check_sandbox(metrics_port: int | None = None) -> None:
    """Refuse to start a worker that could not isolate tenant code (docs/security.md), or
    whose sandbox or egress settings are wrong (a usage error naming the setting)."""
    import os
    import tempfile

    from takohost.runtime import isolation

    environ = dict(os.environ)
    if metrics_port is not None:
        environ["TAKOHOST_METRICS_PORT"] = str(metrics_port)
    from workers.egress import config as egress_config

    try:
        policy = isolation.policy.Policy.from_environ(environ)
        egress_config.load(environ)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if policy.mode == "none":
        logging.getLogger("takohost.sandbox").warning(
            "TAKOHOST_SANDBOX_ISOLATION=none: tenant code runs WITHOUT isolation (only for code you trust)")
        return
    root = tempfile.mkdtemp(prefix="takohost-probe-")
    try:
        isolation.forking.probe(isolation.mounts.Layout.compute(policy), root=root)
    except isolation.syscalls.IsolationUnavailable as exc:
        raise click.ClickException(
            f"the sandbox cannot isolate tenant code on this machine ({exc}): it needs user, PID, mount "
            "and network namespaces. Set TAKOHOST_SANDBOX_ISOLATION=none to run without isolation "
            "(unsafe: only for code you trust)") from None
    finally:
        os.rmdir(root)


@click.group()
@click.version_option(package_name="takohost", prog_name="takohost", message="%(prog)s %(version)s")
def main() -> None:
    """takohost: a durable-workflow and cron host."""


@main.command()
@click.option("--port", default=8080, show_default=True, type=int, help="API port.")
@click.option("--data-dir", default=".takohost", show_default=True, help="Where state is kept.")
@click.option("--metrics-port", type=click.IntRange(min=1, max=65535), default=None,
              help="Serve Prometheus metrics of the whole stack on this port (TAKOHOST_METRICS_ADDR, "
                   "default 127.0.0.1; unauthenticated; env TAKOHOST_METRICS_PORT).")
@click.option("--egress-allow", "egress_allow", multiple=True, metavar="ADDRESS:PORT",
              help="Let tenant code reach this one address and port, which egress refuses otherwise "
                   "(a local mock API: --egress-allow 127.0.0.1:3000); repeatable; never the host's "
                   "own services. Adds to TAKOHOST_EGRESS_ALLOW.")
def dev(port: int, data_dir: str, metrics_port: int | None, egress_allow: tuple[str, ...]) -> None:
    """Run API, worker and beat on an embedded PostgreSQL and Redis in the data dir."""
    from host_cli import devmode

    _host_process()
    raise SystemExit(
        devmode.run(
            port=port, data_dir=data_dir, metrics_port=_metrics_port(metrics_port), egress_allow=egress_allow
        )
    )


@main.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply the Alembic migrations to TAKOHOST_DATABASE_URL."""
    from core import config
    from models import migrate

    migrate.upgrade(config.load_settings().database_url)
    click.echo("database is at the latest revision")


def _raise_fd_limit(want: int) -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to ``want`` descriptors (at most the hard limit): each
    connection of a gunicorn worker is one (inherited by the workers it forks)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=int, help="Port to bind.")
@click.option("--workers", "num_workers", default=2, show_default=True, type=int,
              help="gunicorn worker processes.")
@click.option("--header-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a client has to send a complete request head; then 408 and close.")
@click.option("--body-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a client has to send a request body after its head; then 408 and close.")
@_observability_options
def api(host: str, port: int, num_workers: int, header_timeout: float, body_timeout: float,
        log_format: str | None, metrics_port: int | None) -> None:
    """Serve the HTTP API with gunicorn."""
    _host_process()
    _setup_logging(log_format)
    _serve_metrics("api", metrics_port)
    from gunicorn.app.base import BaseApplication

    from host_api import telemetry
    from host_api.app import create_app
    from host_api.server import JsonErrorThreadWorker

    worker_class = JsonErrorThreadWorker.with_timeouts(header=header_timeout, body=body_timeout)
    connections = 2 * worker_class.max_readers  # slow readers, plus as many served or kept alive
    _raise_fd_limit(connections + 256)

    class _Server(BaseApplication):
        def load_config(self) -> None:
            self.cfg.set("bind", f"{host}:{port}")
            self.cfg.set("workers", num_workers)
            self.cfg.set("threads", 4)
            # gthread, with gunicorn's own error pages (414, 431, bad header…) as JSON (§2.4), and
            # request heads read in its main loop with a deadline (no thread per slow client).
            self.cfg.set("worker_class", worker_class)
            self.cfg.set("worker_connections", connections)
            # gunicorn's maximum: a 256-character instance id percent-encodes to up to 3 KiB.
            self.cfg.set("limit_request_line", 8190)
            self.cfg.set("accesslog", None)
            self.cfg.set("logger_class", telemetry.gunicorn_logger_class())  # lines in --log-format
            self.cfg.set("timeout", 120)
            # Several hosts (or test sessions) may run on one machine: no shared control socket.
            self.cfg.set("control_socket_disable", True)

        def load(self):  # noqa: ANN202 - gunicorn API
            return create_app()

    _Server().run()


@main.command()
@click.option("--concurrency", default=2, show_default=True, type=click.IntRange(min=1),
              help="Processes running replay contexts and cron deliveries (one per core); Operations "
                   "run in one more process of their own, and WorkerVersion import checks in another.")
@click.option("--pool", type=click.Choice(["solo", "prefork"]), default="solo", show_default=True,
              help="solo: --concurrency single-process workers under one supervisor (each consumes "
                   "and runs its tasks itself; the fastest measured). prefork: one Celery parent "
                   "feeding --concurrency pool processes.")
@click.option("--stop-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0),
              help="solo: seconds the processes get to finish their running task on SIGTERM/SIGINT "
                   "before SIGKILL.")
@click.option("--supervised", is_flag=True, hidden=True,
              help="Internal: one process of a solo pool, run by its supervisor.")
@click.option("--control-plane", "control", is_flag=True, hidden=True,
              help="Internal: the process that consumes the control-plane queue only (Operations).")
@click.option("--validation", is_flag=True, hidden=True,
              help="Internal: the process that consumes the WorkerVersion import checks only.")
@click.option("--loglevel", default="INFO", show_default=True)
@_observability_options
def worker(concurrency: int, pool: str, stop_timeout: float, supervised: bool, control: bool,
           validation: bool, loglevel: str, log_format: str | None, metrics_port: int | None) -> None:
    """Run the Celery workers (host_cli.worker_pool: N solo processes under one supervisor)."""
    _host_process()
    _setup_logging(log_format, loglevel)
    if not supervised:  # the supervisor (or prefork parent) serves its processes' metrics
        _serve_metrics("worker", metrics_port)
    _mark_metrics_dead_at_exit()
    if pool == "solo" and not supervised:
        from host_cli import worker_pool

        _check_sandbox(metrics_port)
        supervisor = worker_pool.Supervisor(command=worker_pool.solo_command(loglevel=loglevel),
                                            concurrency=concurrency, stop_timeout=stop_timeout)
        supervisor.add_process(_control_command(loglevel))  # docs/spec/host-features.md#hf-newcomer
        supervisor.add_process(_validation_command(loglevel))
        raise SystemExit(supervisor.run())
    if supervised:
        from host_cli import worker_pool

        worker_pool.die_with_supervisor()
    else:
        _check_sandbox(metrics_port)
    from services.celery_app import app

    if validation:  # docs/spec/host-features.md#hf-neighbours: several import checks at once, no Space takes them all
        from core import config
        from workers import sandbox

        pool, concurrency = "threads", max(2, config.load_settings().validation_concurrency)
        sandbox.get_zygote()  # started before the first check, which then only forks
    if pool == "solo":
        if concurrency != 1:
            raise click.UsageError("a supervised solo process runs one task at a time (--concurrency 1)")
        from workers import sandbox
        from workers.sandbox import children

        # prefork pool processes start their zygote on worker_process_init; solo has no pool process
        children.prespawn(sandbox.get_zygote())
    if pool == "prefork":
        _start_control_process(loglevel)  # docs/spec/host-features.md#hf-newcomer
    queue = (app.conf.takohost_control_queue if control
             else app.conf.takohost_validation_queue if validation else app.conf.task_default_queue)
    if not (control or validation):  # its slots count in the live fleet the per-Space cap follows
        from services import fleet

        fleet.register(slots=concurrency)
    app.worker_main(["worker", f"--pool={pool}", f"--concurrency={concurrency}", f"--loglevel={loglevel}",
                     "-Q", queue, "--without-gossip", "--without-mingle",
                     "--without-heartbeat"])


# --- the control plane's own process (docs/spec/host-features.md#hf-newcomer) ---------------------------------------
# Operations (and anything else in services.celery_app.CONTROL_TASKS) go to a queue of their own,
# consumed by one more process that every `takohost worker` starts and that runs no workflow or
# handler code (only the time-limited import check of a new WorkerVersion):
# with every slot busy in replay contexts or cron handlers, a PUT is still reconciled at once.


def _control_command(loglevel: str) -> list[str]:
    """argv of the control-plane consumer: a supervised solo process on the control queue only."""
    from host_cli import worker_pool

    return worker_pool.solo_command(loglevel=loglevel, extra=["--control-plane"])


def _validation_command(loglevel: str) -> list[str]:
    """argv of the WorkerVersion import checks' consumer (``services.celery_app.VALIDATION_TASKS``):
    tenant code at validation never holds the control plane."""
    from host_cli import worker_pool

    return worker_pool.solo_command(loglevel=loglevel, extra=["--validation"])


def _start_control_process(loglevel: str) -> None:
    """For ``--pool prefork``: start the control-plane and validation consumers beside this Celery
    parent; they die with this process (``PR_SET_PDEATHSIG``, as supervised ones)."""
    import os
    import subprocess

    from host_cli import worker_pool

    env = {**os.environ, worker_pool.SUPERVISOR_PID_ENV: str(os.getpid())}
    for command in (_control_command(loglevel), _validation_command(loglevel)):
        subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def _mark_metrics_dead_at_exit() -> None:
    """A Celery process that ends (pool process or solo worker) marks itself dead in the metrics
    directory (its live gauges stop counting); nothing when metrics are off."""
    from celery import signals

    from services.telemetry import metrics

    def _dead(**_: object) -> None:
        metrics.process_exit()

    signals.worker_process_shutdown.connect(_dead, weak=False)
    signals.worker_shutdown.connect(_dead, weak=False)


@main.command()
@click.option("--loglevel", default="INFO", show_default=True)
@_observability_options
def beat(loglevel: str, log_format: str | None, metrics_port: int | None) -> None:
    """Run the custom beat scheduler (cron matches, timers, sweeps); its metrics endpoint also
    serves the host-wide gauges (instances by status, broker queue depth)."""
    _host_process()
    _setup_logging(log_format, loglevel)
    _serve_metrics("beat", metrics_port, host_state=True)
    from services.celery_app import app

    app.start(["beat", f"--loglevel={loglevel}", "--scheduler", "beat.scheduler:HostScheduler"])


@main.group()
def token() -> None:
    """Bearer tokens."""


@token.command("create")
@click.option("--space", required=True, help="Space the token grants (created if needed).")
@click.option("--data-dir", default=None,
              help="Make it in the database of the `takohost dev` running on this data dir (default: "
                   "TAKOHOST_DATABASE_URL when set, else the `takohost dev` running in ./.takohost).")
def token_create(space: str, data_dir: str | None) -> None:
    """Create a token for SPACE and print it alone on stdout."""
    from host_cli import devinfo

    database_url = None
    if data_dir is not None or not os.environ.get("TAKOHOST_DATABASE_URL"):
        dev = devinfo.find_running(data_dir or devinfo.DEFAULT_DATA_DIR)
        if dev is not None:
            database_url = dev.database_url
        elif data_dir is not None:
            raise click.ClickException(
                f"no takohost dev is running on {data_dir}: start it (`takohost dev --data-dir {data_dir}`) first")
    from models import db as models_db
    from models.errors import DomainError
    from services import tokens

    try:
        with models_db.session_scope(database_url) as session:
            value = tokens.create_token_txn(session, space=space)
    except DomainError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    click.echo(value)


client_commands.register(main)
