"""The migrations are the schema: upgrading an empty database gives exactly the models."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import models


def test_upgrade_on_empty_database_equals_the_models(db_url):
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, models.Base.metadata)
    assert diff == [], f"models and migrations differ; run scripts/regen_migration.sh: {diff}"


def test_upgrade_is_idempotent(db_url):
    from alembic.script import ScriptDirectory

    from models import migrate

    migrate.upgrade(db_url)  # already at head: a no-op, not an error
    [head] = ScriptDirectory.from_config(migrate.alembic_config(db_url)).get_heads()  # one head
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT version_num FROM alembic_version")) == head
