"""The SQL of tenant log lines (``models.tenant_logs``), once, in psycopg's ``%(name)s`` style.

The tenant log aggregate's store (docs/spec/architecture.md#ar-shape): every write of a log line
and of the log quota's counters (``instances.log_bytes``, ``space_usage.log_bytes``) is a statement
here, run by this module's functions (``tests/unit/test_log_sql_home.py`` keeps it so). The engine's
log collector (``workers.tenant_logs``) writes through :func:`write_lines` and :func:`write_marker`,
raw psycopg on the context's connection, in batches: one statement numbers and inserts a batch
(``unnest`` of parallel arrays) and trims the owner's oldest lines beyond the cap. An instance's
batch is fenced like every write of a context (``epoch = %(epoch)s``): a stale context's lines are
dropped. Lines go with their owner by the foreign keys' cascade (retention's purge and a
workflow's DELETE: ``instance_sql.DELETE_INSTANCES``), ``log_bytes`` with the instance row. Reads for
the API are the ``SELECT_*`` statements, through the ``*_txn`` functions (``Connection.exec_driver_sql``);
the console's own reads of the tail are ``services.console``'s page builders.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import orm

#: One line to write: ``(logged_at aware UTC, step, attempt, stream, message, replayed)``.
Line = tuple[dt.datetime, str | None, int | None, str, str, bool]

#: What one stored line counts toward its Space's log quota beyond its UTF-8 bytes: roughly a row's
#: own storage (header, columns, index entries), so that a flood of empty lines counts too.
LINE_OVERHEAD_BYTES = 64

_VALUES = """unnest(%(ats)s::timestamptz[], %(steps)s::bytea[], %(attempts)s::int[], %(streams)s::text[],
              %(messages)s::text[], %(replayed)s::boolean[])
              WITH ORDINALITY AS v(at, step, attempt, stream, message, replayed, ord)"""

_BYTES = f"octet_length(message) + {LINE_OVERHEAD_BYTES}"

#: The Space's usage row (``{space}``: a scalar subquery naming the owner's Space) locked until the
#: statement's transaction ends, so that concurrent writers of one Space decide one after another,
#: each on the ``log_bytes`` the previous one left (``FOR UPDATE`` under READ COMMITTED waits for
#: the other writer and returns the row it committed), then the batch's lines with the running total
#: of their bytes, and the longest prefix of them that fits in the room: ``%(limit)s`` (the log
#: quota in bytes; 0: none) minus that ``log_bytes``.
_KEPT = """q AS (
  SELECT log_bytes FROM space_usage WHERE space = ({space}) FOR UPDATE
), v AS (
  SELECT v.*, sum(octet_length(v.message) + {overhead}) OVER (ORDER BY v.ord) AS total FROM {values}
), k AS (
  SELECT v.* FROM v WHERE %(limit)s <= 0 OR v.total <= %(limit)s - COALESCE((SELECT log_bytes FROM q), 0)
)"""

#: The fenced instance's Space, read from ``f`` (which locks the instance row first: one lock order,
#: the instance row before its Space's usage row, as every other writer; ``models.quota_sql``).
_INSTANCE_SPACE = "SELECT space FROM f"
_DELIVERY_SPACE = (
    "SELECT m.space FROM cron_deliveries d JOIN cron_matches m ON m.pk = d.match_pk WHERE d.pk = %(delivery)s"
)

#: A batch of ``%(n)s`` lines of an instance under the context's token, numbered after the
#: instance's highest ``seq`` and ``%(skip)s`` lines the cap removed before they were written, as
#: many as fit in the Space's log quota (the first ones), the trim of the lines beyond ``%(cap)s``,
#: and the instance's ``log_bytes`` moved by both (which moves its Space's, by trigger); one round
#: trip. Returns ``(inserted, accepted)``: how many lines were written, and whether the token held
#: (``false``: fenced, nothing written).
INSERT_INSTANCE_LINES = f"""
WITH f AS (
  SELECT space FROM instances WHERE pk = %(pk)s AND epoch = %(epoch)s FOR NO KEY UPDATE
), b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE instance_pk = %(pk)s
), {_KEPT.format(overhead=LINE_OVERHEAD_BYTES, values=_VALUES, space=_INSTANCE_SPACE)}, ins AS (
  INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, step, attempt, stream, message, replayed)
  SELECT %(pk)s, b.m + %(skip)s + k.ord, k.at, %(epoch)s, k.step, k.attempt, k.stream, k.message, k.replayed
  FROM f CROSS JOIN b CROSS JOIN k
  ON CONFLICT (instance_pk, seq) WHERE instance_pk IS NOT NULL DO NOTHING
  RETURNING {_BYTES} AS bytes
), trim AS (
  DELETE FROM tenant_logs
  WHERE instance_pk = %(pk)s AND seq <= (SELECT m FROM b) + %(skip)s + (SELECT count(*) FROM k) - %(cap)s
    AND EXISTS (SELECT 1 FROM f)
  RETURNING {_BYTES} AS bytes
), u AS (
  UPDATE instances
  SET log_bytes = log_bytes + COALESCE((SELECT sum(bytes) FROM ins), 0) - COALESCE((SELECT sum(bytes) FROM trim), 0)
  WHERE pk = %(pk)s AND EXISTS (SELECT 1 FROM f) AND (EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM trim))
)
SELECT (SELECT count(*) FROM ins), EXISTS (SELECT 1 FROM f)
"""

#: The same for a cron delivery (its lease makes it the only writer); the Space's ``log_bytes``
#: is moved directly (deliveries are never purged). Returns ``(inserted, true)``.
INSERT_DELIVERY_LINES = f"""
WITH b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE delivery_pk = %(delivery)s
), {_KEPT.format(overhead=LINE_OVERHEAD_BYTES, values=_VALUES, space=_DELIVERY_SPACE)}, ins AS (
  INSERT INTO tenant_logs (delivery_pk, seq, logged_at, step, attempt, stream, message)
  SELECT %(delivery)s, b.m + %(skip)s + k.ord, k.at, k.step, k.attempt, k.stream, k.message
  FROM b CROSS JOIN k
  ON CONFLICT (delivery_pk, seq) WHERE delivery_pk IS NOT NULL DO NOTHING
  RETURNING {_BYTES} AS bytes
), trim AS (
  DELETE FROM tenant_logs
  WHERE delivery_pk = %(delivery)s AND seq <= (SELECT m FROM b) + %(skip)s + (SELECT count(*) FROM k) - %(cap)s
  RETURNING {_BYTES} AS bytes
), d AS (
  SELECT COALESCE((SELECT sum(bytes) FROM ins), 0) - COALESCE((SELECT sum(bytes) FROM trim), 0) AS bytes
), u AS (
  INSERT INTO space_usage AS s (space, log_bytes) SELECT ({_DELIVERY_SPACE}), d.bytes FROM d WHERE d.bytes <> 0
  ON CONFLICT (space) DO UPDATE SET log_bytes = s.log_bytes + excluded.log_bytes
)
SELECT (SELECT count(*) FROM ins), true
"""

#: One ``host`` line of an instance written whatever its Space's log quota (the quota's own
#: marker), fenced; returns its ``seq`` (no row: fenced).
INSERT_INSTANCE_MARKER = f"""
WITH f AS (
  SELECT 1 FROM instances WHERE pk = %(pk)s AND epoch = %(epoch)s
), b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE instance_pk = %(pk)s
), ins AS (
  INSERT INTO tenant_logs (instance_pk, seq, logged_at, epoch, step, attempt, stream, message)
  SELECT %(pk)s, b.m + 1, %(at)s, %(epoch)s, NULL, NULL, 'host', %(message)s FROM f CROSS JOIN b
  ON CONFLICT (instance_pk, seq) WHERE instance_pk IS NOT NULL DO NOTHING
  RETURNING seq, {_BYTES} AS bytes
), u AS (
  UPDATE instances SET log_bytes = log_bytes + (SELECT bytes FROM ins) WHERE pk = %(pk)s AND EXISTS (SELECT 1 FROM ins)
)
SELECT seq FROM ins
"""

#: The same for a cron delivery.
INSERT_DELIVERY_MARKER = f"""
WITH b AS (
  SELECT COALESCE(MAX(seq), 0) AS m FROM tenant_logs WHERE delivery_pk = %(delivery)s
), ins AS (
  INSERT INTO tenant_logs (delivery_pk, seq, logged_at, step, attempt, stream, message)
  SELECT %(delivery)s, b.m + 1, %(at)s, NULL, NULL, 'host', %(message)s FROM b
  ON CONFLICT (delivery_pk, seq) WHERE delivery_pk IS NOT NULL DO NOTHING
  RETURNING seq, {_BYTES} AS bytes
), u AS (
  INSERT INTO space_usage AS s (space, log_bytes) SELECT ({_DELIVERY_SPACE}), bytes FROM ins
  ON CONFLICT (space) DO UPDATE SET log_bytes = s.log_bytes + excluded.log_bytes
)
SELECT seq FROM ins
"""

#: A new text for an instance's marker line ``%(seq)s`` (its count grew), fenced, with the bytes it
#: changed moved to the instance's ``log_bytes``; returns a row if it was rewritten (none: fenced, or
#: the line gave way to the cap).
UPDATE_INSTANCE_MARKER = """
WITH f AS (
  SELECT 1 FROM instances WHERE pk = %(pk)s AND epoch = %(epoch)s
), old AS (
  SELECT octet_length(message) AS bytes FROM tenant_logs WHERE instance_pk = %(pk)s AND seq = %(seq)s
), up AS (
  UPDATE tenant_logs SET message = %(message)s
  WHERE instance_pk = %(pk)s AND seq = %(seq)s AND EXISTS (SELECT 1 FROM f)
  RETURNING octet_length(message) AS bytes
), u AS (
  UPDATE instances SET log_bytes = log_bytes + (SELECT bytes FROM up) - (SELECT bytes FROM old)
  WHERE pk = %(pk)s AND EXISTS (SELECT 1 FROM up)
)
SELECT 1 FROM up
"""

#: The same for a cron delivery's marker line.
UPDATE_DELIVERY_MARKER = f"""
WITH old AS (
  SELECT octet_length(message) AS bytes FROM tenant_logs WHERE delivery_pk = %(delivery)s AND seq = %(seq)s
), up AS (
  UPDATE tenant_logs SET message = %(message)s WHERE delivery_pk = %(delivery)s AND seq = %(seq)s
  RETURNING octet_length(message) AS bytes
), u AS (
  UPDATE space_usage SET log_bytes = log_bytes + (SELECT bytes FROM up) - (SELECT bytes FROM old)
  WHERE space = ({_DELIVERY_SPACE}) AND EXISTS (SELECT 1 FROM up)
)
SELECT 1 FROM up
"""

#: One page of an instance's lines after ``seq`` ``%(after)s``, and the lowest stored ``seq``.
SELECT_INSTANCE_PAGE = """
SELECT seq, logged_at, epoch, step, attempt, stream, message, replayed,
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


# -- running the statements ------------------------------------------------------------------------
#
# The log collector's writes go through the two functions below on its context's (or delivery's)
# autocommit psycopg connection: one statement per batch, the raw-psycopg hot path kept as measured.


def write_lines(
    conn: psycopg.Connection,
    *,
    lines: Sequence[Line],
    skip: int,
    cap: int,
    limit: int,
    instance_pk: int | None = None,
    epoch: int | None = None,
    delivery_pk: int | None = None,
) -> tuple[int, bool]:
    """Write one batch of an owner's log lines in one statement (:data:`INSERT_INSTANCE_LINES`
    fenced by ``epoch``, or :data:`INSERT_DELIVERY_LINES` for ``delivery_pk``; exactly one owner).

    ``lines`` are ``(logged_at aware UTC, step | None, attempt | None, stream, message, replayed)``,
    oldest first; they are numbered after the owner's highest ``seq`` plus ``skip`` (lines the cap
    ``cap`` removed before they were written), as many as fit in the Space's log quota ``limit``
    (bytes; 0: none), and the lines beyond ``cap`` are trimmed (docs/spec/host-features.md#hf-observability).
    A delivery's lines are never ``replayed``. Returns ``(inserted, accepted)``: how many lines
    were written, and whether the instance's token held (``False``: fenced, nothing written).
    Raises ``psycopg.Error`` when the statement fails.
    """
    params: dict[str, Any] = {
        "ats": [line[0] for line in lines],
        "steps": [None if line[1] is None else line[1].encode("utf-8") for line in lines],
        "attempts": [line[2] for line in lines],
        "streams": [line[3] for line in lines],
        "messages": [line[4] for line in lines],
        "replayed": [line[5] for line in lines],
        "n": len(lines),
        "skip": skip,
        "cap": cap,
        "limit": limit,
    }
    if instance_pk is not None:
        params.update(pk=instance_pk, epoch=epoch)
        row = conn.execute(INSERT_INSTANCE_LINES, params).fetchone()
    else:
        params.update(delivery=delivery_pk)
        row = conn.execute(INSERT_DELIVERY_LINES, params).fetchone()
    return (row[0], row[1]) if row else (0, False)


def write_marker(
    conn: psycopg.Connection,
    *,
    message: str,
    at: dt.datetime,
    seq: int | None,
    instance_pk: int | None = None,
    epoch: int | None = None,
    delivery_pk: int | None = None,
) -> int | None:
    """Write an owner's one log-quota marker line (a ``host`` line kept whatever the quota):
    rewrite line ``seq`` with ``message`` when it is given and still stored
    (:data:`UPDATE_INSTANCE_MARKER` / :data:`UPDATE_DELIVERY_MARKER`), otherwise append a new one
    at ``at`` (aware UTC; :data:`INSERT_INSTANCE_MARKER` / :data:`INSERT_DELIVERY_MARKER`), the
    bytes moved to the quota's counters (docs/spec/host-features.md#hf-neighbours). An instance's
    marker is fenced by ``epoch``. Returns the marker's ``seq`` (``None``: fenced, nothing
    written). Raises ``psycopg.Error`` when a statement fails.
    """
    owner: dict[str, Any] = (
        {"pk": instance_pk, "epoch": epoch} if instance_pk is not None else {"delivery": delivery_pk}
    )
    if seq is not None:
        update = UPDATE_INSTANCE_MARKER if instance_pk is not None else UPDATE_DELIVERY_MARKER
        if conn.execute(update, {**owner, "seq": seq, "message": message}).fetchone():
            return seq
    insert = INSERT_INSTANCE_MARKER if instance_pk is not None else INSERT_DELIVERY_MARKER
    row = conn.execute(insert, {**owner, "at": at, "message": message}).fetchone()
    return row[0] if row else None


# -- the aggregate's reads (the API's pages; the console's tail is services.console's) -------------

#: The lowest stored ``seq`` of an instance's lines (``NULL``: none stored).
SELECT_INSTANCE_FIRST = "SELECT MIN(seq) FROM tenant_logs WHERE instance_pk = %(pk)s"


def instance_page_txn(session: orm.Session, *, instance_pk: int, after: int, limit: int) -> list[sa.Row]:
    """At most ``limit`` of an instance's lines after ``seq`` ``after``, in ``seq`` order
    (:data:`SELECT_INSTANCE_PAGE`: rows ``seq, logged_at, epoch, step (bytes | None), attempt,
    stream, message, replayed, first`` — ``first`` the lowest stored ``seq``), in the caller's
    transaction."""
    query = {"pk": instance_pk, "after": after, "limit": limit}
    return list(session.connection().exec_driver_sql(SELECT_INSTANCE_PAGE, query).all())


def first_instance_seq_txn(session: orm.Session, *, instance_pk: int) -> int | None:
    """The lowest stored ``seq`` of an instance's lines (``None``: none stored), in the caller's
    transaction; ``first - 1`` lines gave way to the cap."""
    return session.connection().exec_driver_sql(SELECT_INSTANCE_FIRST, {"pk": instance_pk}).scalar()


def match_page_txn(session: orm.Session, *, match_pk: int, delivery: int, after: int, limit: int) -> list[sa.Row]:
    """At most ``limit`` lines of the deliveries of cron match ``match_pk`` after position
    ``(delivery, after)`` (:data:`SELECT_MATCH_PAGE`: rows ``delivery_pk, n, seq, logged_at,
    stream, message, first``), in the caller's transaction."""
    query = {"match": match_pk, "d": delivery, "after": after, "limit": limit}
    return list(session.connection().exec_driver_sql(SELECT_MATCH_PAGE, query).all())
