"""``takohost dev``: the whole host on the embedded default (CONTRACT §9, issue 6).

One foreground supervisor runs the same processes as production — the API, a Celery
worker and the beat — against:

* a SQLite file in the data dir instead of Postgres (the source of truth; state survives
  Ctrl-C and restarts), and
* an embedded Redis-protocol server (``fakeredis``'s TCP server, in this process) instead
  of Redis, used as broker and lease store. It is memory-only: losing it loses no accepted
  data, exactly like losing Redis in production — the beat sweeps re-dispatch from the
  database.

Same engine code paths; no second implementation of step semantics. Limits: one machine,
SQLite's single writer, not for production.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEV_SPACE = "dev"


@dataclass
class _Child:
    name: str
    args: list[str]
    proc: subprocess.Popen | None = None
    restarts: int = 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_embedded_redis() -> tuple[str, object]:
    """Start the in-process Redis-protocol server; returns ``(url, server)``."""
    from fakeredis import TcpFakeServer

    port = _free_port()
    server = TcpFakeServer(("127.0.0.1", port), server_type="redis")
    threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True).start()
    return f"redis://127.0.0.1:{port}/0", server


def _dev_token(data_dir: pathlib.Path) -> str:
    """The token for Space ``dev``: created once, kept in ``DATA_DIR/token`` (mode 0600)."""
    from models import db as models_db
    from workers.services import tokens

    path = data_dir / "token"
    if path.exists():
        value = path.read_text().strip()
        import sqlalchemy as sa

        from models import resources

        with models_db.session_scope() as session:
            known = session.scalar(sa.select(resources.Token.id).where(
                resources.Token.token_hash == tokens.hash_token(value)))
        if known is not None:
            return value
    with models_db.session_scope() as session:
        value = tokens.create_token_txn(session, space=DEV_SPACE)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def run(*, port: int, data_dir: str, concurrency: int = 2) -> int:
    """Run API, worker and beat in the foreground until Ctrl-C; returns the exit code."""
    root = pathlib.Path(data_dir).resolve()
    (root / "logs").mkdir(parents=True, exist_ok=True)
    redis_url, _server = start_embedded_redis()
    env = {
        **os.environ,
        "TAKOHOST_DATABASE_URL": f"sqlite:///{root / 'takohost.db'}",
        "TAKOHOST_REDIS_URL": redis_url,
        "TAKOHOST_NAMESPACE": "dev",
    }
    env.pop("TAKOHOST_BROKER_URL", None)
    os.environ.update({k: env[k] for k in ("TAKOHOST_DATABASE_URL", "TAKOHOST_REDIS_URL", "TAKOHOST_NAMESPACE")})

    from models import migrate

    migrate.upgrade(env["TAKOHOST_DATABASE_URL"])
    token = _dev_token(root)

    cli = [sys.executable, "-m", "takohost.cli"]
    children = [
        _Child("api", [*cli, "api", "--port", str(port), "--workers", "1"]),
        _Child("worker", [*cli, "worker", "--concurrency", str(concurrency)]),
        _Child("beat", [*cli, "beat"]),
    ]

    def spawn(child: _Child) -> None:
        logfile = open(root / "logs" / f"{child.name}.log", "ab")  # noqa: SIM115 - owned by the child
        child.proc = subprocess.Popen(child.args, env=env, stdout=logfile, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    for child in children:
        spawn(child)

    url = f"http://127.0.0.1:{port}"
    sys.stdout.write(
        f"takohost dev is running (embedded default: SQLite + in-process broker; not for production)\n"
        f"  URL:    {url}\n"
        f"  Space:  {DEV_SPACE}\n"
        f"  Token:  {token}\n"
        f"  Data:   {root}   (logs in {root / 'logs'})\n"
        f"  export TAKOHOST_URL={url} TAKOHOST_TOKEN={token}\n"
        "Press Ctrl-C to stop; starting again keeps all state.\n"
    )
    sys.stdout.flush()

    stopping = False

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping:
            for child in children:
                if child.proc is not None and child.proc.poll() is not None and not stopping:
                    child.restarts += 1
                    sys.stderr.write(f"takohost dev: {child.name} exited ({child.proc.returncode}); "
                                     f"restarting (see {root / 'logs' / (child.name + '.log')})\n")
                    time.sleep(min(5, child.restarts))
                    spawn(child)
            time.sleep(0.2)
    finally:
        for child in children:
            if child.proc is not None and child.proc.poll() is None:
                os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        sys.stdout.write("takohost dev stopped; state kept in the data dir\n")
    return 0
