"""The one connection manager of workers, beat and the API: SQLAlchemy engines and sessions, and
the raw psycopg connections of the engine's hot path.

One engine per process and URL; sessions are short and explicit. Helpers that run inside
a caller's transaction take the session and end in ``_txn`` (docs/spec/house-rules.md#hr-txn).
The replay context's fenced commits and the log collectors run on :func:`connection_for` instead:
one autocommit psycopg connection per process and URL, opened from the same URL as the engine
(raw psycopg is twice as fast per step there, ``bench/store_bench.py``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.types.json
import sqlalchemy as sa
from sqlalchemy import orm

from takohost.domain import deepjson

_engines: dict[tuple[int, str], sa.Engine] = {}
_makers: dict[tuple[int, str], orm.sessionmaker[orm.Session]] = {}

#: A pooled connection idle longer than this (seconds) is pinged when checked out, and replaced if
#: dead (Postgres restarted, an idle timeout dropped it). A connection reused sooner is not: a ping
#: on every checkout cost a round trip per request and per session (docs/spec/host-features.md#hf-performance). One that died
#: within this window fails its statement once, and SQLAlchemy then invalidates the whole pool.
PING_AFTER_IDLE_SECONDS = 10.0


def _ping_if_idle(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "checkin")
    def _checkin(dbapi_connection: object, record: object) -> None:
        record.info["idle_since"] = time.monotonic()  # type: ignore[attr-defined]

    @sa.event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: object, record: object, proxy: object) -> None:
        since = record.info.get("idle_since")  # type: ignore[attr-defined]
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)  # type: ignore[arg-type]
            dbapi_connection.rollback()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - any failure: the pool retries with a new connection
            raise sa.exc.DisconnectionError() from exc


def get_engine(url: str) -> sa.Engine:
    """Return this process's engine for ``url`` (a new one after ``fork``)."""
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = sa.create_engine(
            url,
            pool_size=5,
            max_overflow=10,
            # JSON columns hold documents of any depth (docs/spec/host-features.md#hf-newcomer): see takohost.domain.deepjson
            json_serializer=deepjson.dumps_stored,
            json_deserializer=deepjson.loads_stored,
        )
        _ping_if_idle(engine)
    return engine


def database_url() -> str:
    """The configured database URL (``TAKOHOST_DATABASE_URL``)."""
    from core import config

    return config.load_settings().database_url


def sessionmaker(url: str | None = None) -> orm.sessionmaker[orm.Session]:
    """This process's session factory bound to the engine for ``url`` (default: configured URL);
    one per process and URL, like the engine."""
    key = (os.getpid(), url or database_url())
    maker = _makers.get(key)
    if maker is None:
        maker = _makers[key] = orm.sessionmaker(bind=get_engine(key[1]), expire_on_commit=False)
    return maker


@contextlib.contextmanager
def session_scope(url: str | None = None) -> Iterator[orm.Session]:
    """Open a session, commit on success, roll back on error, always close.

    The error is what propagates: a ``SystemExit`` or ``KeyboardInterrupt`` that a signal handler
    raises while ``commit`` runs its after-commit hooks (Celery beat's SIGTERM handler does) finds
    the transaction committed, where a rollback is refused (``InvalidRequestError``); it is raised
    as it came, not hidden behind that refusal."""
    session = sessionmaker(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        with contextlib.suppress(sa.exc.InvalidRequestError):  # committed already: nothing to undo
            session.rollback()
        raise
    finally:
        session.close()


def dispose_all() -> None:
    """Dispose every engine of this process (after fork, or at shutdown)."""
    _makers.clear()
    for key, engine in list(_engines.items()):
        engine.dispose(close=key[0] == os.getpid())
        del _engines[key]


# Documents of any depth (docs/spec/host-features.md#hf-newcomer): json columns read by :func:`connection_for`'s connections
# are parsed like the SQLAlchemy engine's (models.db), with takohost.domain.deepjson.
psycopg.types.json.set_json_loads(deepjson.loads_stored)

_connections: dict[tuple[int, str, bool], psycopg.Connection] = {}


def connect_kwargs(url: str) -> dict:
    """``psycopg.connect`` keyword arguments for a SQLAlchemy ``postgresql+psycopg://`` URL: the
    same connection SQLAlchemy's psycopg dialect would open, query parameters included (a unix
    socket directory as ``?host=/path``, ``sslmode``…); host ``127.0.0.1`` and port 5432 when the
    URL names neither."""
    parsed = sa.engine.make_url(url)
    kwargs: dict = {"host": parsed.host or "127.0.0.1", "port": parsed.port or 5432}
    if parsed.username is not None:
        kwargs["user"] = parsed.username
    if parsed.password is not None:
        kwargs["password"] = parsed.password
    if parsed.database is not None:
        kwargs["dbname"] = parsed.database
    for key, value in parsed.query.items():
        kwargs[key] = value[-1] if isinstance(value, tuple) else value
    return kwargs


def connection_for(url: str, *, synchronous_commit: bool = True) -> psycopg.Connection:
    """This process's autocommit psycopg connection to ``url`` (a SQLAlchemy URL); reconnects
    after ``fork`` or when the previous connection broke. For one thread at a time (the context).

    ``synchronous_commit=False`` gives a second connection whose commits do not wait for the WAL
    flush: used only for the epoch bump at context start, whose loss in a Postgres crash is
    harmless (every connection of a context dies with the server, and any later synchronous commit
    flushes the WAL up to and including it).
    """
    key = (os.getpid(), url, synchronous_commit)
    conn = _connections.get(key)
    if conn is None or conn.closed or conn.broken:
        options: dict[str, Any] = {} if synchronous_commit else {"options": "-c synchronous_commit=off"}
        conn = psycopg.connect(**connect_kwargs(url), autocommit=True, **options)
        _connections[key] = conn
    return conn


def discard_connection(url: str) -> None:
    """Forget (and close) this process's connections to ``url`` after an error."""
    for synchronous in (True, False):
        conn = _connections.pop((os.getpid(), url, synchronous), None)
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass
