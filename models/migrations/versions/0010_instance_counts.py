"""instance_counts: each DurableWorkflow's instances per status, maintained instead of counted
(docs/spec/durable-workflow.md#dw-resource ``instanceCounts``; docs/spec/host-features.md#hf-console; ``models.status_counts``)

The console's pages and the DurableWorkflow observer counted ``instances`` rows per status: ~30 ms
at 100,000 instances of one workflow, on every page load and every observation. Now triggers on
``instances`` append each change of a count to ``instance_count_deltas`` in the writer's own
transaction — an insert, never an update of a shared counter row, so no writer waits for another
and no two statements can deadlock on counters — and the beat sweep folds the deltas into
``instance_counts``. A count is ``instance_counts.n`` plus its pending deltas, exact at any snapshot.

Inserts and deletes are counted once per statement (transition tables); an update by a row trigger
that fires only when ``status`` changes. The counts of the instances already stored are filled in
here, after the triggers exist and while their creation still locks out writers, so none is
missed or counted twice.

Revision ID: 0010_instance_counts
Revises: 0009_cron_run_instances
Create Date: 2026-12-04 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_instance_counts"
down_revision = "0009_cron_run_instances"
branch_labels = None
depends_on = None

_STATEMENT_FUNCTION = """
CREATE FUNCTION instance_counts_of_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO instance_count_deltas (workflow_uid, status, delta)
    SELECT n.workflow_uid, n.status, count(*) FROM new_rows n GROUP BY n.workflow_uid, n.status;
  ELSE
    INSERT INTO instance_count_deltas (workflow_uid, status, delta)
    SELECT o.workflow_uid, o.status, -count(*) FROM old_rows o GROUP BY o.workflow_uid, o.status;
  END IF;
  RETURN NULL;
END $$
"""

_ROW_FUNCTION = """
CREATE FUNCTION instance_counts_of_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO instance_count_deltas (workflow_uid, status, delta)
  VALUES (OLD.workflow_uid, OLD.status, -1), (NEW.workflow_uid, NEW.status, 1);
  RETURN NULL;
END $$
"""

_TRIGGERS = (
    "CREATE TRIGGER instance_counts_insert AFTER INSERT ON instances REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION instance_counts_of_statement()",
    "CREATE TRIGGER instance_counts_delete AFTER DELETE ON instances REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION instance_counts_of_statement()",
    "CREATE TRIGGER instance_counts_update AFTER UPDATE OF status ON instances FOR EACH ROW "
    "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION instance_counts_of_update()",
)


def upgrade() -> None:
    op.create_table(
        "instance_counts",
        sa.Column("workflow_uid", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("workflow_uid", "status", name=op.f("pk_instance_counts")),
    )
    op.create_table(
        "instance_count_deltas",
        sa.Column("pk", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("workflow_uid", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_instance_count_deltas")),
    )
    op.create_index(
        "ix_instance_count_deltas_workflow_uid", "instance_count_deltas", ["workflow_uid"], unique=False
    )
    op.execute(_STATEMENT_FUNCTION)
    op.execute(_ROW_FUNCTION)
    for statement in _TRIGGERS:
        op.execute(statement)
    op.execute(
        "INSERT INTO instance_counts (workflow_uid, status, n) "
        "SELECT workflow_uid, status, count(*) FROM instances GROUP BY workflow_uid, status"
    )


def downgrade() -> None:
    for name in ("instance_counts_insert", "instance_counts_delete", "instance_counts_update"):
        op.execute(f"DROP TRIGGER {name} ON instances")
    op.execute("DROP FUNCTION instance_counts_of_update()")
    op.execute("DROP FUNCTION instance_counts_of_statement()")
    op.drop_index("ix_instance_count_deltas_workflow_uid", table_name="instance_count_deltas")
    op.drop_table("instance_count_deltas")
    op.drop_table("instance_counts")
