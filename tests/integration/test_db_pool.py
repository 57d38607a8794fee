"""The SQLAlchemy pool of ``models.db`` (docs/spec/host-features.md#hf-performance): one session factory per process and URL,
no ping on every checkout, and a connection that died while idle is replaced, not reported."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import db as models_db


def test_one_sessionmaker_per_url(db_url):
    assert models_db.sessionmaker(db_url) is models_db.sessionmaker(db_url)


def _backend_pid(url: str) -> int:
    with models_db.session_scope(url) as session:
        return session.scalar(sa.text("SELECT pg_backend_pid()"))


def test_a_connection_reused_at_once_is_not_pinged(db_url):
    engine = models_db.get_engine(db_url)
    _backend_pid(db_url)
    pings = []
    original = engine.dialect.do_ping
    engine.dialect.do_ping = lambda conn: pings.append(conn) or original(conn)
    try:
        _backend_pid(db_url)
        _backend_pid(db_url)
    finally:
        del engine.dialect.do_ping
    assert pings == []


def test_a_connection_killed_while_idle_is_replaced(db_url, monkeypatch):
    from tests.conftest import _admin

    monkeypatch.setattr(models_db, "PING_AFTER_IDLE_SECONDS", 0.0)
    models_db.get_engine(db_url).dispose()
    first = _backend_pid(db_url)
    with _admin().connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first})
    assert _backend_pid(db_url) != first  # a fresh connection, no error


def test_a_signal_raised_while_the_commit_ends_propagates_as_itself(db_url):
    # Celery beat's SIGTERM handler raises SystemExit wherever the beat is; raised in the commit's
    # after-commit hooks it found the transaction committed, and the rollback's refusal
    # (InvalidRequestError, with a traceback in the beat's log) replaced it.
    def stop(session):
        raise SystemExit()

    with pytest.raises(SystemExit):
        with models_db.session_scope(db_url) as session:
            sa.event.listen(session, "after_commit", stop)
            session.execute(sa.text("SELECT 1"))
