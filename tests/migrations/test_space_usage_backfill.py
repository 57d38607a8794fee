"""The quota counters' migration on a database that already holds data (docs/spec/host-features.md#hf-neighbours): every
Space's ``space_usage`` row equals a recount of what it held before the upgrade, and the triggers
keep it exact after."""

from __future__ import annotations

import sqlalchemy as sa

from models import migrate
from tests.migrations.conftest import revision_before

BEFORE_SQL = """
INSERT INTO spaces (name, created_at) VALUES ('a', now()), ('b', now());
INSERT INTO resources (uid, space, form, name, generation, spec, observed, output, phase, created_at, updated_at,
                       deleted_at)
VALUES ('v1', 'a', 'WorkerVersion', 'v1', 1, '{"modules": {"main.py": "abc", "x.py": "é"}}', '{}', '{}', 'idle',
        now(), now(), NULL),
       ('v2', 'a', 'WorkerVersion', 'v2', 1, '{"modules": {"main.py": "gone"}}', '{}', '{}', 'idle',
        now(), now(), now());
INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, step_count, next_event_id, next_sequence,
                       inbox_count, inbox_bytes, created_at, updated_at, lifetime_ends_at)
VALUES ('w', 'a', 'i1', 'running', 1, 0, 1, 1, 3, 30, now(), now(), now()),
       ('w', 'a', 'i2', 'complete', 1, 0, 1, 1, 1, 10, now(), now(), now()),
       ('w', 'b', 'i3', 'waiting', 1, 0, 1, 1, 0, 0, now(), now(), now());
INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, stream, message)
SELECT pk, 1, now(), 1, 'stdout', 'hello' FROM instances WHERE instance_id = 'i1';
INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, stream, message)
SELECT pk, 1, now(), 1, 'stdout', 'héllo!' FROM instances WHERE instance_id = 'i3';
"""


def test_the_counters_are_backfilled_from_what_the_spaces_hold(empty_database):
    url, engine = empty_database
    migrate.upgrade(url, revision_before(url, "_space_quotas"))
    with engine.begin() as conn:
        conn.exec_driver_sql(BEFORE_SQL.replace("%", "%%"))
    migrate.upgrade(url)
    with engine.begin() as conn:
        rows = conn.execute(
            sa.text("SELECT space, live_instances, stored_events, log_bytes, version_code_bytes FROM space_usage")
        ).all()
        assert sorted(map(tuple, rows)) == [("a", 1, 4, 5 + 64, 5), ("b", 1, 0, 7 + 64, 0)]
        # and the triggers keep them: i1 completes and consumes its inbox, i3 is deleted
        conn.execute(sa.text("UPDATE instances SET status = 'complete', inbox_count = 0 WHERE instance_id = 'i1'"))
        conn.execute(sa.text("UPDATE instances SET log_bytes = 0 WHERE instance_id = 'i3'"))  # b: 71 → 0
        conn.execute(sa.text("DELETE FROM instances WHERE instance_id = 'i3'"))
        rows = conn.execute(sa.text("SELECT space, live_instances, stored_events, log_bytes FROM space_usage")).all()
        assert sorted(map(tuple, rows)) == [("a", 0, 1, 5 + 64), ("b", 0, 0, 0)]
