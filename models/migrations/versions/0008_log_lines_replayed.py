"""log_lines_replayed: a tenant log line printed during replay is marked (docs/spec/host-features.md#hf-console)

A workflow's code outside steps runs again in every replay context, and so does every ``print`` in
it: ``tenant_logs.replayed`` is true for a tenant line written while the context was still asking
for the steps its history recorded, so ``takohost instances logs`` can hide the repeats (and show
them with ``--replayed``). Lines written before this revision count as not replayed.

Revision ID: 0008_log_lines_replayed
Revises: 0007_console_sessions
Create Date: 2026-12-03 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_log_lines_replayed"
down_revision = "0007_console_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: PostgreSQL 11+ adds the column without rewriting the table.
    op.add_column("tenant_logs", sa.Column("replayed", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("tenant_logs", "replayed")
