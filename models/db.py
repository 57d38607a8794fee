"""Engine and session factory for workers, beat and the API.

One engine per process and URL; sessions are short and explicit. Helpers that run inside
a caller's transaction take the session and end in ``_txn`` (docs/spec/house-rules.md#hr-txn).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

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
    """Open a session, commit on success, roll back on error, always close."""
    session = sessionmaker(url)()
    try:
        yield session
        session.commit()
    except BaseException:
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
