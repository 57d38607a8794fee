"""Persistence: SQLAlchemy 2 models and Alembic migrations (the source of truth is Postgres)."""

from models import cron, instances, packages, resources, tenant_logs, usage  # noqa: F401  (register every table on Base.metadata)
from models.base import Base  # noqa: F401
