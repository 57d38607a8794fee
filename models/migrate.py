"""Apply the Alembic migrations programmatically (``takohost db upgrade``)."""

from __future__ import annotations

import pathlib

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = pathlib.Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic ``Config`` for ``url`` pointing at ``models/migrations``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(url), revision)
