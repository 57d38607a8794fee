"""instances: keyset indexes of the instance list, (workflow_uid, pk) and (workflow_uid, status, pk)

The list (``GET …/instances``, ``services.instances.list_instances``) pages by
``WHERE workflow_uid = :w [AND status = :s] AND pk > :after ORDER BY pk LIMIT n``. Without these,
Postgres walks the primary key and filters out every row of the other workflows (and statuses),
or sorts all rows of a status: a page cost grew with the table (docs/spec/host-features.md#hf-performance).

Revision ID: 0003_instance_list_keyset
Revises: 0002_tenant_logs
Create Date: 2026-12-01 16:50:00
"""

from __future__ import annotations

from alembic import op

revision = "0003_instance_list_keyset"
down_revision = "0002_tenant_logs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_instances_workflow_pk", "instances", ["workflow_uid", "pk"], unique=False)
    op.create_index("ix_instances_workflow_status_pk", "instances", ["workflow_uid", "status", "pk"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_instances_workflow_status_pk", table_name="instances")
    op.drop_index("ix_instances_workflow_pk", table_name="instances")
