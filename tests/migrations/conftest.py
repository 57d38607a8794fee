"""Fixtures of the migration tests: an empty database of the run's server, dropped after."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from models import migrate


@pytest.fixture()
def empty_database(db_url):
    """``(url, engine)`` of a new, empty database on the run's server (not migrated); dropped
    (``WITH (FORCE)``) after the test with every engine of the process disposed."""
    from models import db as models_db
    from tests.conftest import ADMIN_URL

    name = f"takohost_mig_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        yield url, engine
    finally:
        engine.dispose()
        models_db.dispose_all()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def revision_before(url: str, suffix: str) -> str:
    """The revision before the one whose id ends with ``suffix`` (found by name, so that a
    re-chained history still finds it)."""
    scripts = ScriptDirectory.from_config(migrate.alembic_config(url))
    [script] = [s for s in scripts.walk_revisions() if s.revision.endswith(suffix)]
    return script.down_revision
