"""space_usage: the counters follow an instance UPDATE by a row trigger that fires only when the
update changes what they count (liveness, inbox_count, log_bytes), instead of a statement trigger
on every UPDATE of instances (docs/spec/host-features.md#hf-neighbours; ``models.usage``)

The statement trigger of ``0005_space_quotas`` ran a PL/pgSQL function and a join of two transition
tables for every engine commit, although nearly none of them changes a counter. A row trigger's
``WHEN`` is evaluated without calling the function. Every UPDATE of instances that changes one of
these columns touches one row (engine commits, sendEvent, terminate, the log statements), so
taking the Space's usage row inside that statement keeps the lock order (the instance row, then
the usage row); multi-row updates (timer wake-ups, sweeps, the DELETE fence) change none of them.

Revision ID: 0006_space_usage_update_trigger
Revises: 0005_space_quotas
Create Date: 2026-12-03 17:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0006_space_usage_update_trigger"
down_revision = "0005_space_quotas"
branch_labels = None
depends_on = None

_LIVE_NEW = "NEW.status NOT IN ('complete', 'errored', 'terminated')"
_LIVE_OLD = "OLD.status NOT IN ('complete', 'errored', 'terminated')"

_FUNCTION = f"""
CREATE FUNCTION space_usage_of_instance_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE space_usage SET live_instances = live_instances + ({_LIVE_NEW})::int - ({_LIVE_OLD})::int,
         stored_events = stored_events + NEW.inbox_count - OLD.inbox_count,
         log_bytes = log_bytes + NEW.log_bytes - OLD.log_bytes
  WHERE space = NEW.space;
  RETURN NULL;
END $$
"""

_TRIGGER = f"""
CREATE TRIGGER space_usage_update AFTER UPDATE OF status, inbox_count, log_bytes ON instances FOR EACH ROW
WHEN (({_LIVE_NEW}) IS DISTINCT FROM ({_LIVE_OLD}) OR NEW.inbox_count IS DISTINCT FROM OLD.inbox_count
      OR NEW.log_bytes IS DISTINCT FROM OLD.log_bytes)
EXECUTE FUNCTION space_usage_of_instance_update()
"""


def upgrade() -> None:
    op.execute("DROP TRIGGER space_usage_update ON instances")
    op.execute(_FUNCTION)
    op.execute(_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER space_usage_update ON instances")
    op.execute("DROP FUNCTION space_usage_of_instance_update()")
    op.execute(
        "CREATE TRIGGER space_usage_update AFTER UPDATE ON instances REFERENCING OLD TABLE AS old_rows "
        "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION space_usage_of_instances()"
    )
