"""space_usage: the counters of each Space's quotas, instances.log_bytes, and the triggers that keep
them exact (docs/spec/host-features.md#hf-neighbours; ``models.usage``, ``services.quotas``)

Revision ID: 0005_space_quotas
Revises: 0004_package_layers
Create Date: 2026-12-03 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_space_quotas"
down_revision = "0004_package_layers"
branch_labels = None
depends_on = None

#: Must equal ``models.log_sql.LINE_OVERHEAD_BYTES`` (a migration does not import the models it
#: migrates: the value it backfilled with is the one of its time).
_LINE_OVERHEAD = 64

#: One function for the three triggers: the deltas of ``live_instances``, ``stored_events`` and
#: ``log_bytes`` per Space of one statement's rows (transition tables), applied once per Space.
_FUNCTION = """
CREATE FUNCTION space_usage_of_instances() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO space_usage AS u (space, live_instances, stored_events, log_bytes, version_code_bytes)
    SELECT n.space, count(*) FILTER (WHERE n.status NOT IN ('complete', 'errored', 'terminated')),
           sum(n.inbox_count), sum(n.log_bytes), 0
    FROM new_rows n GROUP BY n.space
    ON CONFLICT (space) DO UPDATE SET live_instances = u.live_instances + excluded.live_instances,
        stored_events = u.stored_events + excluded.stored_events, log_bytes = u.log_bytes + excluded.log_bytes;
  ELSIF TG_OP = 'DELETE' THEN
    UPDATE space_usage u SET live_instances = u.live_instances - d.live, stored_events = u.stored_events - d.events,
           log_bytes = u.log_bytes - d.logs
    FROM (SELECT o.space, count(*) FILTER (WHERE o.status NOT IN ('complete', 'errored', 'terminated')) AS live,
                 sum(o.inbox_count) AS events, sum(o.log_bytes) AS logs
          FROM old_rows o GROUP BY o.space) d
    WHERE u.space = d.space AND (d.live <> 0 OR d.events <> 0 OR d.logs <> 0);
  ELSE
    UPDATE space_usage u SET live_instances = u.live_instances + d.live, stored_events = u.stored_events + d.events,
           log_bytes = u.log_bytes + d.logs
    FROM (SELECT n.space,
                 sum((n.status NOT IN ('complete', 'errored', 'terminated'))::int
                     - (o.status NOT IN ('complete', 'errored', 'terminated'))::int) AS live,
                 sum(n.inbox_count - o.inbox_count) AS events, sum(n.log_bytes - o.log_bytes) AS logs
          FROM new_rows n JOIN old_rows o ON o.pk = n.pk GROUP BY n.space) d
    WHERE u.space = d.space AND (d.live <> 0 OR d.events <> 0 OR d.logs <> 0);
  END IF;
  RETURN NULL;
END $$
"""

_TRIGGERS = (
    "CREATE TRIGGER space_usage_insert AFTER INSERT ON instances REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION space_usage_of_instances()",
    "CREATE TRIGGER space_usage_update AFTER UPDATE ON instances REFERENCING OLD TABLE AS old_rows "
    "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION space_usage_of_instances()",
    "CREATE TRIGGER space_usage_delete AFTER DELETE ON instances REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION space_usage_of_instances()",
)

_BACKFILL = f"""
UPDATE instances i SET log_bytes = l.bytes
FROM (SELECT instance_pk, sum(octet_length(message) + {_LINE_OVERHEAD}) AS bytes
      FROM tenant_logs WHERE instance_pk IS NOT NULL GROUP BY instance_pk) l
WHERE i.pk = l.instance_pk;
INSERT INTO space_usage (space, live_instances, stored_events, log_bytes, version_code_bytes)
SELECT s.name,
       (SELECT count(*) FROM instances i WHERE i.space = s.name
          AND i.status NOT IN ('complete', 'errored', 'terminated')),
       (SELECT COALESCE(sum(i.inbox_count), 0) FROM instances i WHERE i.space = s.name),
       (SELECT COALESCE(sum(i.log_bytes), 0) FROM instances i WHERE i.space = s.name)
       + (SELECT COALESCE(sum(octet_length(l.message) + {_LINE_OVERHEAD}), 0)
          FROM tenant_logs l JOIN cron_deliveries d ON d.pk = l.delivery_pk JOIN cron_matches m ON m.pk = d.match_pk
          WHERE m.space = s.name),
       (SELECT COALESCE(sum(octet_length(f.value)), 0)
          FROM resources r CROSS JOIN LATERAL json_each_text(r.spec -> 'modules') f
          WHERE r.space = s.name AND r.form = 'WorkerVersion' AND r.deleted_at IS NULL)
FROM spaces s
"""


def upgrade() -> None:
    op.create_table(
        "space_usage",
        sa.Column("space", sa.String(length=63), nullable=False),
        sa.Column("live_instances", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("stored_events", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("log_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("version_code_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("space", name=op.f("pk_space_usage")),
    )
    op.add_column("instances", sa.Column("log_bytes", sa.BigInteger(), server_default="0", nullable=False))
    op.execute(_BACKFILL)
    op.execute(_FUNCTION)
    for statement in _TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    for name in ("space_usage_delete", "space_usage_update", "space_usage_insert"):
        op.execute(f"DROP TRIGGER {name} ON instances")
    op.execute("DROP FUNCTION space_usage_of_instances()")
    op.drop_column("instances", "log_bytes")
    op.drop_table("space_usage")
