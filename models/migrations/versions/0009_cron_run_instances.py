"""cron_run_instances: the instances a cron run started (docs/spec/cron-trigger.md#cr-runs)

A ``scheduled`` handler that calls ``env.NAME.create`` starts a DurableWorkflow instance; this table
names each one beside the delivery that created it, so the runs ledger (``GET …/runs``) and the
console link a run to the instances it started. The row goes with its delivery (cascade); the
instance is named by ``(workflow_uid, instance_id)``, not referenced.

Revision ID: 0009_cron_run_instances
Revises: 0008_log_lines_replayed
Create Date: 2026-12-04 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0009_cron_run_instances"
down_revision = "0008_log_lines_replayed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cron_run_instances",
        sa.Column("pk", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("delivery_pk", sa.BigInteger(), nullable=False),
        sa.Column("workflow_uid", sa.String(length=36), nullable=False),
        sa.Column("instance_id", models.base.ScalarText(), nullable=False),
        sa.Column("created_at", models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_pk"],
            ["cron_deliveries.pk"],
            name=op.f("fk_cron_run_instances_delivery_pk_cron_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_cron_run_instances")),
    )
    op.create_index(
        op.f("ix_cron_run_instances_delivery_pk"), "cron_run_instances", ["delivery_pk"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_cron_run_instances_delivery_pk"), table_name="cron_run_instances")
    op.drop_table("cron_run_instances")
