"""Engine and session factory for workers, beat and the API.

One engine per process and URL; sessions are short and explicit. Helpers that run inside
a caller's transaction take the session and end in ``_txn`` (STYLE §5).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy import orm

_engines: dict[tuple[int, str], sa.Engine] = {}


def get_engine(url: str) -> sa.Engine:
    """Return this process's engine for ``url`` (a new one after ``fork``)."""
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = sa.create_engine(url, pool_size=5, max_overflow=10, pool_pre_ping=True)
    return engine


def database_url() -> str:
    """The configured database URL (``TAKOHOST_DATABASE_URL``)."""
    from takohost import config

    return config.load_settings().database_url


def sessionmaker(url: str | None = None) -> orm.sessionmaker[orm.Session]:
    """A session factory bound to the engine for ``url`` (default: configured URL)."""
    return orm.sessionmaker(bind=get_engine(url or database_url()), expire_on_commit=False)


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
    for key, engine in list(_engines.items()):
        engine.dispose(close=key[0] == os.getpid())
        del _engines[key]
