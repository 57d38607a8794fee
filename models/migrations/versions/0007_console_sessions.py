"""console_sessions: server-side web-console sessions (docs/spec/host-features.md#hf-neighbours)

The console's cookie used to be the raw API token. Now it is a random session id; this table
keeps its SHA-256, the token it was made from (``ON DELETE CASCADE``: deleting a token ends its
sessions), the session's CSRF token and its start and last use (idle timeout, absolute lifetime).

Revision ID: 0007_console_sessions
Revises: 0006_space_usage_update_trigger
Create Date: 2026-12-03 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0007_console_sessions"
down_revision = "0006_space_usage_update_trigger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["tokens.id"], name=op.f("fk_console_sessions_token_id_tokens"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_token_id"), "console_sessions", ["token_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_console_sessions_token_id"), table_name="console_sessions")
    op.drop_table("console_sessions")
