"""The SQL of tenant log lines (``models.tenant_logs``), once, in psycopg's ``%(name)s`` style.

Written by the engine's log collector (``workers.tenant_logs``, raw psycopg on the context's
connection) in batches: one statement numbers and inserts a batch (``unnest`` of parallel arrays)
and trims the owner's oldest lines beyond the cap. An instance's batch is fenced like every write of a
context (``epoch = %(epoch)s``): a stale context's lines are dropped. Reads for the API are the
``SELECT_*`` statements, through ``Connection.exec_driver_sql``.
"""

from __future__ import annotations

_VALUES = """unnest(%(ats)s::timestamptz[], %(steps)s::bytea[], %(attempts)s::int[], %(streams)s::text[],
              %(messages)s::text[]) WITH ORDINALITY AS v(at, step, attempt, stream, message, ord)"""

#: A batch of ``%(n)s`` lines of an instance under the context's token, numbered after the
#: instance's highest ``seq`` and ``%(skip)s`` lines the cap removed before they were written,
#: and the trim of the lines beyond ``%(cap)s``; one round trip.
#: Returns how many lines were inserted (0 when fenced).
INSERT_INSTANCE_LINES = f"""
WITH f AS (
  SELECT 1 FROM instances WHERE pk = %(pk)s AND epoch = %(epoch)s
), b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE instance_pk = %(pk)s
), ins AS (
  INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, step, attempt, stream, message)
  SELECT %(pk)s, b.m + %(skip)s + v.ord, v.at, %(epoch)s, v.step, v.attempt, v.stream, v.message
  FROM f CROSS JOIN b CROSS JOIN {_VALUES}
  ON CONFLICT (instance_pk, seq) WHERE instance_pk IS NOT NULL DO NOTHING
  RETURNING 1
), trim AS (
  DELETE FROM tenant_logs WHERE instance_pk = %(pk)s AND seq <= (SELECT m FROM b) + %(skip)s + %(n)s - %(cap)s
    AND EXISTS (SELECT 1 FROM f)
)
SELECT count(*) FROM ins
"""

#: The same for a cron delivery (its lease makes it the only writer).
INSERT_DELIVERY_LINES = f"""
WITH b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE delivery_pk = %(delivery)s
), ins AS (
  INSERT INTO tenant_logs (delivery_pk, seq, logged_at, step, attempt, stream, message)
  SELECT %(delivery)s, b.m + %(skip)s + v.ord, v.at, v.step, v.attempt, v.stream, v.message
  FROM b CROSS JOIN {_VALUES}
  ON CONFLICT (delivery_pk, seq) WHERE delivery_pk IS NOT NULL DO NOTHING
  RETURNING 1
), trim AS (
  DELETE FROM tenant_logs WHERE delivery_pk = %(delivery)s AND seq <= (SELECT m FROM b) + %(skip)s + %(n)s - %(cap)s
)
SELECT count(*) FROM ins
"""
#: One page of an instance's lines after ``seq`` ``%(after)s``, and the lowest stored ``seq``.
SELECT_INSTANCE_PAGE = """
SELECT seq, logged_at, epoch, step, attempt, stream, message,
       (SELECT MIN(seq) FROM tenant_logs WHERE instance_pk = %(pk)s) AS first
FROM tenant_logs WHERE instance_pk = %(pk)s AND seq > %(after)s
ORDER BY seq LIMIT %(limit)s
"""

#: One page of the lines of every delivery of cron match ``%(match)s`` (deliveries in start
#: order, each delivery's lines in ``seq`` order) after position ``(%(d)s, %(after)s)``, with
#: each delivery's lowest stored ``seq`` and its number within the match (1, 2, …).
SELECT_MATCH_PAGE = """
WITH d AS (
  SELECT pk, row_number() OVER (ORDER BY started_at, pk) AS n FROM cron_deliveries WHERE match_pk = %(match)s
)
SELECT l.delivery_pk, d.n, l.seq, l.logged_at, l.stream, l.message,
       (SELECT MIN(seq) FROM tenant_logs m WHERE m.delivery_pk = l.delivery_pk) AS first
FROM tenant_logs l JOIN d ON d.pk = l.delivery_pk
WHERE (d.n, l.seq) > (%(d)s, %(after)s)
ORDER BY d.n, l.seq LIMIT %(limit)s
"""
