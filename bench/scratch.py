"""A scratch database for a benchmark: created on the admin URL, dropped after (``WITH (FORCE)``).

``TAKOHOST_TEST_DATABASE_URL`` names the admin URL (the suite's setting; default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``). The database is empty: the caller
migrates it (``models.migrate.upgrade``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import sqlalchemy as sa

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """Yield the URL of a new database ``{prefix}_{8 hex}``; every engine of this process is
    disposed and the database dropped when the block ends."""
    admin_url = os.environ.get("TAKOHOST_TEST_DATABASE_URL", DEFAULT_ADMIN_URL)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        from models import db as models_db

        models_db.dispose_all()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
