"""The SQL of a Space's usage counters (``models.usage``), once, in psycopg's ``%(name)s`` style.

Reached through ``Connection.exec_driver_sql`` (services) or a psycopg connection (the engine's
log collector). Lock order, everywhere: an instance row before its Space's usage row, so a
statement that holds the usage row never waits for an instance (``models.usage``).
"""

from __future__ import annotations

#: The Space's usage row, created if missing and locked ``FOR UPDATE`` until the transaction ends
#: (a no-op update when it exists, which locks it and returns the committed counters): the checks
#: that follow in the same transaction are exact, whoever writes concurrently.
LOCK_USAGE = """
INSERT INTO space_usage AS u (space) VALUES (%(space)s)
ON CONFLICT (space) DO UPDATE SET space = u.space
RETURNING live_instances, stored_events, log_bytes, version_code_bytes
"""

#: The counters of ``%(space)s`` without a lock (no row: a Space that never held anything).
SELECT_USAGE = """
SELECT live_instances, stored_events, log_bytes, version_code_bytes FROM space_usage WHERE space = %(space)s
"""

#: Add ``%(bytes)s`` (negative: release) to the Space's Version code bytes.
ADD_VERSION_CODE = """
UPDATE space_usage SET version_code_bytes = GREATEST(0, version_code_bytes + %(bytes)s) WHERE space = %(space)s
"""

#: The UTF-8 bytes of a stored WorkerVersion's module sources.
VERSION_CODE_BYTES = """
SELECT COALESCE(sum(octet_length(f.value)), 0) FROM resources r CROSS JOIN LATERAL json_each_text(r.spec -> 'modules') f
WHERE r.uid = %(uid)s
"""
