"""Alembic environment: online migrations against ``sqlalchemy.url``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

import models

config = context.config
target_metadata = models.Base.metadata


def run_migrations_online() -> None:
    """Run the migrations in one transaction."""
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None, "alembic.ini or the caller sets sqlalchemy.url"
    connectable = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
