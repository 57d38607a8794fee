"""The hand-written SQL of instances, their steps, history, inbox events and timers: every
statement once, in psycopg's ``%(name)s`` style, for the engine's store (``workers.engine.store``,
raw psycopg) and the instance services (``services.instances``, ``instance_events`` and
``instance_stop``, on their session's connection). Every write of an instance's state and history
is here — create, the contexts' commits, ``send_event``, terminate and the DELETE purge's fence —
and every history row is a ``takohost.domain.history`` record stored by :func:`document` (the
text of ``ContextStarted``, whose epoch the statement itself takes, is written to match); the
timers' firing, the sweep's mark and the purge of whole instances too. Names, ids and event types are bytea UTF-8 (pass
``str.encode()``), documents ``json`` text. Reads the services and the sweep compose (filters,
pages, counts) stay SQLAlchemy Core beside the models they touch (``models.instances``).

The engine's hot commits are ONE statement whose data-modifying CTEs hang off the fenced
``UPDATE`` named ``f`` (``… FROM f``): the ``*_CTE`` fragments below are joined by
``workers.engine.store.ContextStore.apply``. ``send_event``'s acceptance of an event is one
statement of the same shape (:func:`accept_event`): both write a ``takohost.domain.commits.Commit``
through :func:`commit_ctes`, so the step row, the timers and the history rows (built by
``takohost.domain.history``) are written by the same code whoever commits them.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from models import resource_sql
from takohost.domain import commits, decide, deepjson, history

# -- creating an instance, accepting an event (services) -------------------------------------------

#: A shared advisory lock on the live DurableWorkflow ``%(uid)s`` of ``%(space)s`` (no row: not
#: live); pairs with the exclusive one the DELETE purge closes the UID under. The same row carries
#: the workflow's readiness facts (``resource_sql.WORKFLOW_READINESS``'s columns after the lock's),
#: read in the same round trip: readiness needs no lock, and the create checks it after its insert.
LOCK_WORKFLOW_SHARED = f"""
SELECT pg_advisory_xact_lock_shared(hashtext(w.uid)), ready.*
FROM resources w LEFT JOIN LATERAL ({resource_sql.WORKFLOW_READINESS}) ready ON true
WHERE w.uid = %(uid)s AND w.space = %(space)s AND w.form = 'DurableWorkflow' AND w.deleted_at IS NULL
"""

#: ``(closed, pk, live)``: the ``queued`` instance, ``InstanceCreated`` and its ``lifetime`` timer,
#: unless the UID is closed or the Space's ``live`` instances (``space_usage``, locked by
#: ``quota_sql.LOCK_USAGE`` just before) are at ``%(live_limit)s`` (0: no limit); ``pk`` NULL also
#: when the id exists.
INSERT_INSTANCE = """
WITH closed AS (
  SELECT EXISTS (SELECT 1 FROM workflow_closures WHERE workflow_uid = %(uid)s) AS closed,
         COALESCE((SELECT live_instances FROM space_usage WHERE space = %(space)s), 0) AS live
), ins AS (
  INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, params, step_count, next_event_id,
                         next_sequence, inbox_count, inbox_bytes, created_at, updated_at, lifetime_ends_at,
                         last_event_at)
  SELECT %(uid)s, %(space)s, %(instance_id)s, 'queued', 0, CAST(%(params)s AS json), 0, 2, 1, 0, 0,
         %(now)s, %(now)s, %(lifetime)s, %(now)s
  FROM closed WHERE NOT closed.closed AND (%(live_limit)s <= 0 OR closed.live < %(live_limit)s)
  ON CONFLICT (workflow_uid, instance_id) DO NOTHING
  RETURNING pk
), h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT ins.pk, 1, 'InstanceCreated', CAST(%(attributes)s AS json), %(now)s FROM ins
), t AS (
  INSERT INTO timers (instance_pk, kind, due_at, created_at)
  SELECT ins.pk, 'lifetime', %(lifetime)s, %(now)s FROM ins
)
SELECT (SELECT closed FROM closed), (SELECT pk FROM ins), (SELECT live FROM closed)
"""

#: The instance row locked ``FOR UPDATE`` with its counters and the closure flag.
LOCK_INSTANCE = """
SELECT i.pk, i.status, i.stopping, i.inbox_count, i.inbox_bytes, i.next_sequence, i.next_event_id,
       EXISTS (SELECT 1 FROM workflow_closures c WHERE c.workflow_uid = i.workflow_uid) AS closed
FROM instances i JOIN resources r ON r.uid = i.workflow_uid
WHERE i.workflow_uid = %(uid)s AND i.instance_id = %(instance_id)s
  AND r.space = %(space)s AND r.form = 'DurableWorkflow' AND r.deleted_at IS NULL
FOR UPDATE OF i
"""

#: The instance's pending wait ``(name, config, timeout_at)`` (no row: none), found by the
#: instance's key so that it can go out in the same pipeline as ``LOCK_INSTANCE``, right after
#: it: a statement of its own, whose snapshot is taken once the row lock is granted, so it sees
#: the wait a context committed together with ``waiting``.
SELECT_PENDING_WAIT = """
SELECT s.name, s.config, s.timeout_at FROM steps s
WHERE s.instance_pk = (SELECT i.pk FROM instances i
                       WHERE i.workflow_uid = %(uid)s AND i.instance_id = %(instance_id)s)
  AND s.kind = 'wait' AND s.state = 'pending'
"""

#: The instance ``UPDATE`` that accepts event ``%(sequence)s`` (the locked row's ``next_sequence``:
#: no row when it moved) and numbers ``%(n)s`` history events from ``f.e0`` (``{sets}``: extra
#: assignments, ``SET_EVENT_QUEUED`` for an event that goes to the inbox); ``f.last`` is the
#: newest event's time after it. Statements: :func:`accept_event`.
ACCEPT_UPDATE_CTE = """f AS (
  UPDATE instances SET next_sequence = next_sequence + 1, next_event_id = next_event_id + %(n)s,
         step_count = step_count + %(new)s, last_event_at = GREATEST(last_event_at, %(newest)s::timestamptz){sets}
  WHERE pk = %(pk)s AND next_sequence = %(sequence)s
  RETURNING next_event_id - %(n)s AS e0, last_event_at AS last
)"""

#: The queued event's inbox row (``%(type)s`` bytea UTF-8, ``%(payload)s`` json text or NULL).
INBOX_INSERT_CTE = """e AS (
  INSERT INTO inbox_events (instance_pk, sequence, type, payload, canonical_bytes, accepted_at)
  SELECT %(pk)s, %(sequence)s, %(type)s, CAST(%(payload)s AS json), %(size)s, %(now)s FROM f
)"""

#: Assignment appended to ``ACCEPT_UPDATE_CTE`` for an event that goes to the inbox.
SET_EVENT_QUEUED = ", inbox_count = inbox_count + 1, inbox_bytes = inbox_bytes + %(size)s"


def accept_event(
    commit: commits.Commit,
    *,
    pk: int,
    sequence: int,
    now: dt.datetime,
    inbox: tuple[str, Any, int] | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(statement, params)`` of ``send_event``'s acceptance of event ``sequence`` by instance
    ``pk`` whose row the transaction holds locked (``LOCK_INSTANCE``; ``sequence`` is its
    ``next_sequence``): ONE statement that moves the counters and writes ``commit``
    (``commits.event_queued`` or ``commits.event_delivered``) with the same CTEs and history rows
    as a context's commit (:func:`commit_ctes`). ``inbox`` = ``(event_type, payload, size)`` of an
    event that goes to the inbox (``payload`` a document or ``None``, ``size`` its canonical bytes);
    ``None`` for a direct delivery (the commit's step consumes it). The statement returns one row
    ``(e0,)`` (the first event id), none when ``next_sequence`` moved (it cannot under the lock)."""
    stamps = history.stamps(commit.events, now=now)
    params: dict[str, Any] = {
        "pk": pk,
        "sequence": sequence,
        "now": now,
        "n": len(commit.events),
        "new": commit.new_steps,
        "status": commit.status,
        "newest": stamps[-1] if stamps else now,
    }
    parts = []
    sets = commit_sets(commit)
    if inbox is not None:
        event_type, payload, size = inbox
        params.update(type=event_type.encode("utf-8"), payload=document(payload), size=size)
        sets += SET_EVENT_QUEUED
    parts.append(ACCEPT_UPDATE_CTE.format(sets=sets))
    if inbox is not None:
        parts.append(INBOX_INSERT_CTE)
    parts += commit_ctes(commit, params, stamps=stamps)
    return statement(parts), params


# -- stopping instances (services.instance_stop) ---------------------------------------------------

#: Fence instance ``%(pk)s`` for terminate (docs/spec/durable-workflow.md#dw-terminate): ``epoch + 1``
#: (its owner's commits are refused from now on), ``stopping = 'terminate'``, the terminate note
#: (``%(note)s``: json text or NULL) kept in ``error`` until :func:`finish_termination` moves it into
#: the history, and every timer deleted (a queued wake is refused by the fence too: a context starts
#: only while ``stopping`` is unset). Returns ``(pk,)``.
FENCE_TERMINATE = """
WITH f AS (
  UPDATE instances SET epoch = epoch + 1, stopping = 'terminate', updated_at = %(now)s,
         error = CAST(%(note)s AS json)
  WHERE pk = %(pk)s RETURNING pk
), t AS (
  DELETE FROM timers WHERE instance_pk = %(pk)s
)
SELECT pk FROM f
"""

#: Instance ``%(pk)s`` locked ``FOR UPDATE``: ``(status, error, space, workflow_uid, instance_id)``
#: (no row: gone); ``instance_id`` is bytea UTF-8.
LOCK_FOR_TERMINATION = """
SELECT status, error, space, workflow_uid, instance_id FROM instances WHERE pk = %(pk)s FOR UPDATE
"""

#: ``terminated`` with the note, output and error cleared, the inbox and the timers purged, and the
#: counters for ``%(n)s`` history events from ``f.e0`` (``{sets}``: the commit's own assignments).
TERMINATED_CTE = """f AS (
  UPDATE instances SET stopping = NULL, output = NULL, error = NULL, terminal_at = %(now)s,
         inbox_count = 0, inbox_bytes = 0, next_event_id = next_event_id + %(n)s,
         last_event_at = GREATEST(last_event_at, %(newest)s::timestamptz){sets}
  WHERE pk = %(pk)s
  RETURNING next_event_id - %(n)s AS e0, last_event_at AS last
), i AS (
  DELETE FROM inbox_events WHERE instance_pk = %(pk)s
), t AS (
  DELETE FROM timers WHERE instance_pk = %(pk)s
)"""


def finish_termination(*, pk: int, note: dict | None, now: dt.datetime) -> tuple[str, dict[str, Any]]:
    """``(statement, params)`` that publishes ``terminated`` for instance ``pk`` whose row the
    transaction holds locked (``LOCK_FOR_TERMINATION``) and whose stop is proven: ONE statement
    (``TERMINATED_CTE``) appending ``InstanceTerminated`` with ``note`` (``{"reason"?, "by"?}``,
    ``history.terminated``) through the same history CTE as every other commit (:func:`commit_ctes`).
    Returns one row ``(e0,)``."""
    commit = commits.Commit(events=[history.terminated(note)], status="terminated", touch=True)
    stamps = history.stamps(commit.events, now=now)
    params: dict[str, Any] = {"pk": pk, "now": now, "n": 1, "status": commit.status, "newest": stamps[-1]}
    parts = [TERMINATED_CTE.format(sets=commit_sets(commit)), *commit_ctes(commit, params, stamps=stamps)]
    return statement(parts), params


#: Close DurableWorkflow ``%(uid)s`` (DELETE, docs/spec/durable-workflow.md#dw-delete) under the
#: exclusive advisory lock that pairs with ``LOCK_WORKFLOW_SHARED``: a create either committed
#: before (and is purged with the UID) or sees the closure. Two statements, one transaction.
LOCK_WORKFLOW_EXCLUSIVE = "SELECT pg_advisory_xact_lock(hashtext(%(uid)s))"
CLOSE_WORKFLOW = """
INSERT INTO workflow_closures (workflow_uid, closed_at) VALUES (%(uid)s, %(now)s)
ON CONFLICT (workflow_uid) DO NOTHING
"""

#: Fence every non-terminal instance of ``%(uid)s`` for the purge once (``epoch + 1``, ``stopping =
#: 'delete'``; one already marked keeps its epoch) and delete every timer of the UID's instances.
#: Returns ``(pk, fenced)`` of each non-terminal instance (``fenced``: by this statement).
FENCE_WORKFLOW_DELETE = """
WITH f AS (
  UPDATE instances SET epoch = epoch + 1, stopping = 'delete', updated_at = %(now)s
  WHERE workflow_uid = %(uid)s AND status IN ('queued', 'running', 'sleeping', 'waiting')
    AND stopping IS DISTINCT FROM 'delete'
  RETURNING pk
), t AS (
  DELETE FROM timers USING instances i WHERE timers.instance_pk = i.pk AND i.workflow_uid = %(uid)s
)
SELECT i.pk, i.pk IN (SELECT pk FROM f) FROM instances i
WHERE i.workflow_uid = %(uid)s AND i.status IN ('queued', 'running', 'sleeping', 'waiting')
"""


#: Delete the instances ``%(pks)s`` (a list of pks) and every row that hangs off them — history,
#: steps, inbox, timers (tenant log lines go by their foreign key's cascade) — in one statement:
#: retention's purge and a workflow's deletion share it.
DELETE_INSTANCES = """
WITH h AS (
  DELETE FROM history_events WHERE instance_pk = ANY(%(pks)s)
), s AS (
  DELETE FROM steps WHERE instance_pk = ANY(%(pks)s)
), e AS (
  DELETE FROM inbox_events WHERE instance_pk = ANY(%(pks)s)
), t AS (
  DELETE FROM timers WHERE instance_pk = ANY(%(pks)s)
)
DELETE FROM instances WHERE pk = ANY(%(pks)s)
"""

#: The sweep's mark on the runnable instances ``%(pks)s`` it re-dispatches (``updated_at``: its
#: grace period starts again, so the next sweep does not send them twice).
TOUCH_RUNNABLE = """
UPDATE instances SET updated_at = %(now)s WHERE pk = ANY(%(pks)s) AND status IN ('queued', 'running')
"""


# -- timers (workers.engine.timers) -----------------------------------------------------------------

#: Take up to ``%(batch)s`` timers due at or before ``%(now)s`` (oldest due first; ``SKIP LOCKED``:
#: two beats never take one timer), delete them, and make their instances runnable: ``running``
#: (a ``queued`` one stays ``queued``, docs/spec/host-limits.md#hl-decisions) unless terminal or
#: being stopped, whose timers are just dropped. Returns one row ``(taken, woken)``: how many
#: timers were taken, and the pks of the instances to dispatch.
FIRE_DUE_TIMERS = """
WITH taken AS (
  SELECT pk, instance_pk FROM timers WHERE due_at <= %(now)s ORDER BY due_at LIMIT %(batch)s
  FOR UPDATE SKIP LOCKED
), d AS (
  DELETE FROM timers USING taken WHERE timers.pk = taken.pk
), w AS (
  UPDATE instances SET status = CASE WHEN status = 'queued' THEN 'queued' ELSE 'running' END,
         updated_at = %(now)s
  WHERE pk IN (SELECT instance_pk FROM taken) AND status IN ('queued', 'sleeping', 'waiting', 'running')
    AND stopping IS NULL
  RETURNING pk
)
SELECT (SELECT count(*) FROM taken), ARRAY(SELECT pk FROM w ORDER BY pk)
"""


# -- a replay context (engine) ----------------------------------------------------------------------

#: The instance, its DurableWorkflow's spec and its Worker's live Deployment.
SELECT_CONTEXT_START = """
SELECT i.status, i.stopping, i.workflow_uid, i.space, i.instance_id, i.params, i.lifetime_ends_at,
       w.spec, (w.deleted_at IS NULL) AS live, d.spec AS deployment,
       EXISTS (SELECT 1 FROM workflow_closures c WHERE c.workflow_uid = i.workflow_uid) AS closed
FROM instances i
JOIN resources w ON w.uid = i.workflow_uid
LEFT JOIN resources d ON d.form = 'WorkerDeployment' AND d.deleted_at IS NULL
     AND d.worker_uid = COALESCE(w.worker_uid, w.spec::json -> 'worker' ->> 'resourceUid')
WHERE i.pk = %(pk)s
"""

SELECT_VERSION_SPEC = "SELECT spec FROM resources WHERE uid = %(uid)s AND form = 'WorkerVersion'"
SELECT_SPACE = "SELECT space FROM instances WHERE pk = %(pk)s"
SELECT_EPOCH = "SELECT epoch FROM instances WHERE pk = %(pk)s"
SELECT_EPOCHS = "SELECT pk, epoch FROM instances WHERE pk = ANY(%(pks)s)"

#: Take the fencing token (``epoch + 1``, ``running``) and append ``ContextStarted``. Its epoch is
#: only known here, so the statement writes the attributes' text itself, byte for byte what
#: :func:`document` makes of ``history.context_started(version, epoch).attributes`` (compact, keys in
#: the builder's order), from ``version_json``, the versionUid's JSON text (:func:`json_value`).
START_CONTEXT = """
WITH f AS (
  UPDATE instances SET epoch = epoch + 1, status = 'running', version_uid = %(version)s,
         updated_at = %(now)s, next_event_id = next_event_id + 1,
         last_event_at = GREATEST(last_event_at, %(now)s)
  WHERE pk = %(pk)s AND status IN ('queued', 'running') AND stopping IS NULL
    AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.instance_pk = %(pk)s AND t.kind = 'retry')
    AND NOT EXISTS (SELECT 1 FROM workflow_closures c WHERE c.workflow_uid = instances.workflow_uid)
  RETURNING epoch, next_event_id - 1 AS e0, step_count, last_event_at
), h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT %(pk)s, f.e0, 'ContextStarted',
         ('{"versionUid":' || %(version_json)s::text || ',"epoch":' || f.epoch || '}')::json, f.last_event_at
  FROM f
)
SELECT epoch, step_count FROM f
"""

SELECT_STEPS = """
SELECT name, kind, state, attempts, result, error, config, wake_at, timeout_at
FROM steps WHERE instance_pk = %(pk)s ORDER BY pk
"""

#: ``l`` locks the row first and, READ COMMITTED, returns its newest version even when the
#: statement waited for a concurrent ``send_event``: ``l.last`` is the newest event's time.
LOCK_ROW_CTE = "l AS (SELECT last_event_at AS last FROM instances WHERE pk = %(pk)s FOR UPDATE)"

#: The fenced ``UPDATE`` (``{sets}``: extra ``, col = …`` assignments).
FENCED_UPDATE_CTE = """f AS (
  UPDATE instances SET next_event_id = next_event_id + %(n)s, step_count = step_count + %(new)s,
         last_event_at = GREATEST(l.last, %(newest)s::timestamptz){sets}
  FROM l WHERE pk = %(pk)s AND epoch = %(epoch)s RETURNING next_event_id - %(n)s AS e0, l.last AS last
)"""

STEP_UPSERT_CTE = """
s AS (
  INSERT INTO steps (instance_pk, name, kind, state, attempts, result, error, config, wake_at, timeout_at,
                     created_at, updated_at)
  SELECT %(pk)s, %(name)s, %(kind)s, %(state)s, %(attempts)s, %(result)s::json, %(error)s::json,
         %(config)s::json, %(wake_at)s, %(timeout_at)s, %(now)s, %(now)s FROM f
  ON CONFLICT (instance_pk, name) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
         result = excluded.result, error = excluded.error, wake_at = excluded.wake_at,
         updated_at = excluded.updated_at
)"""

#: Assignments appended to a fenced ``UPDATE`` (``{sets}``): a new status, a touch, a consumed event.
SET_STATUS = ", status = %(status)s"
SET_TOUCH = ", updated_at = %(now)s"
SET_EVENT_CONSUMED = ", inbox_count = inbox_count - 1, inbox_bytes = inbox_bytes - %(size)s"

TIMER_UPSERT_CTE = """
t AS (
  INSERT INTO timers (instance_pk, kind, due_at, created_at)
  SELECT %(pk)s, %(timer_kind)s, %(timer_due)s, %(now)s FROM f
  ON CONFLICT (instance_pk, kind) DO UPDATE SET due_at = excluded.due_at
)"""

#: History rows numbered from ``f.e0`` (``{values}``: ``(i, %(tI)s, %(aI)s, %(tsI)s::timestamptz)``).
HISTORY_CTE = """h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT %(pk)s, f.e0 + v.i, v.t, v.a::json, GREATEST(v.ts, f.last)
  FROM f CROSS JOIN (VALUES {values}) AS v(i, t, a, ts)
)"""

#: Delete the timer ``%(cancel_kind)s`` (``commits.Commit.cancel_timer``) when ``f`` matched.
TIMER_CANCEL_CTE = """c AS (
  DELETE FROM timers WHERE instance_pk = %(pk)s AND kind = %(cancel_kind)s AND EXISTS (SELECT 1 FROM f)
)"""


def document(value: Any) -> str | None:
    """A document's text for a ``json`` column (``deepjson.dumps_stored``); ``None`` → SQL NULL."""
    return None if value is None else deepjson.dumps_stored(value)


def json_value(value: Any) -> str:
    """The JSON text of one value inside a stored document, as :func:`document` writes it (``None``
    → ``null``): for statements that write a document's text around a value only they know."""
    return deepjson.dumps_stored(value)


def commit_sets(commit: commits.Commit) -> str:
    """The ``{sets}`` a commit adds to its instance ``UPDATE``: ``SET_STATUS`` (param ``status``)
    and ``SET_TOUCH`` (``now``)."""
    sets = ""
    if commit.status is not None:
        sets += SET_STATUS
    if commit.touch:
        sets += SET_TOUCH
    return sets


def step_params(row: decide.StepRecord) -> dict[str, Any]:
    """The parameters of ``STEP_UPSERT_CTE`` / ``UPSERT_STEP`` for the step row ``row``."""
    return {
        "name": row.name.encode("utf-8"),
        "kind": row.kind,
        "state": row.state,
        "attempts": row.attempts,
        "result": document(row.result),
        "error": document(row.error),
        "config": document(row.config),
        "wake_at": row.wake_at,
        "timeout_at": row.timeout_at,
    }


def commit_ctes(commit: commits.Commit, params: dict[str, Any], *, stamps: list[dt.datetime]) -> list[str]:
    """The CTEs that hang off an instance ``UPDATE`` named ``f`` (returning ``e0``, the first event
    id, and ``last``, the newest stored event's time) and write ``commit``: the step upsert, the
    timer upsert, the timer deletion and the history rows (``stamps``: ``history.stamps`` of its
    events), in that order. Adds their parameters to ``params`` (which holds ``pk`` and ``now``).
    Used by the engine's fenced commits and by ``send_event`` (:func:`accept_event`) alike, so a
    record is written the same way whoever commits it."""
    parts = []
    if commit.step is not None:
        parts.append(STEP_UPSERT_CTE)
        params.update(step_params(commit.step))
    if commit.timer is not None:
        parts.append(TIMER_UPSERT_CTE)
        params.update(timer_kind=commit.timer[0], timer_due=commit.timer[1])
    if commit.cancel_timer is not None:
        parts.append(TIMER_CANCEL_CTE)
        params["cancel_kind"] = commit.cancel_timer
    events = commit.events
    if events:
        for (t, a, ts), event, stamp in zip(_HISTORY_KEYS, events, stamps, strict=False):
            params[t] = event.event_type
            params[a] = document(event.attributes)
            params[ts] = stamp
        parts.append(_history_cte(len(events)))
    return parts


#: The parameter names of history row ``i`` (``t``, ``a``, ``ts`` + ``i``), for the first rows.
_HISTORY_KEYS = [(f"t{i}", f"a{i}", f"ts{i}") for i in range(64)]


@functools.cache
def _history_cte(count: int) -> str:
    """``HISTORY_CTE`` for ``count`` rows (made once per count)."""
    if count > len(_HISTORY_KEYS):
        raise ValueError(f"a commit appends at most {len(_HISTORY_KEYS)} history events, not {count}")
    values = ", ".join(f"({i}, %(t{i})s, %(a{i})s, %(ts{i})s::timestamptz)" for i in range(count))
    return HISTORY_CTE.format(values=values)


def statement(parts: list[str]) -> str:
    """One statement of the CTEs ``parts`` (the first defines ``f``) returning ``f``'s ``e0``."""
    return "WITH " + ",\n".join(parts) + "\nSELECT e0 FROM f"


# -- inside a transaction holding the row lock (waits) ----------------------------------------------

#: The fenced row lock: the next event id and the newest event's time (no row: fenced).
LOCK_FENCED = """
UPDATE instances SET updated_at = %(now)s WHERE pk = %(pk)s AND epoch = %(epoch)s
RETURNING next_event_id, last_event_at
"""

#: The oldest event of ``%(type)s`` accepted at or before ``%(timeout_at)s`` (``{columns}``: what
#: to return of it).
FIND_EVENT = """
SELECT {columns} FROM inbox_events
WHERE instance_pk = %(pk)s AND type = %(type)s AND accepted_at <= %(timeout_at)s
ORDER BY sequence LIMIT 1
"""

DELETE_EVENT = "DELETE FROM inbox_events WHERE pk = %(inbox_pk)s"
DELETE_INBOX = "DELETE FROM inbox_events WHERE instance_pk = %(pk)s"

#: The locked row's counters (``{sets}``: extra assignments).
UPDATE_LOCKED = """
UPDATE instances SET next_event_id = next_event_id + %(n)s, step_count = step_count + %(new)s,
       last_event_at = COALESCE(%(newest)s, last_event_at){sets}
WHERE pk = %(pk)s
"""

#: The step and timer upserts on their own (``f`` is a dummy row: the lock is already held).
UPSERT_STEP = "WITH f AS (SELECT 1)," + STEP_UPSERT_CTE + " SELECT 1"
UPSERT_TIMER = "WITH f AS (SELECT 1)," + TIMER_UPSERT_CTE + " SELECT 1"
DELETE_TIMER = "DELETE FROM timers WHERE instance_pk = %(pk)s AND kind = %(cancel_kind)s"

#: One history row (``executemany``).
INSERT_HISTORY = """
INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
VALUES (%(pk)s, %(event_id)s, %(event_type)s, %(attributes)s::json, %(stamp)s)
"""

#: ``complete``/``errored`` with the inbox and timers purged and the history appended; returns
#: whether an event was accepted while the statement waited for the row lock (purge again).
COMMIT_TERMINAL = """
WITH seen AS (
  SELECT next_sequence AS seq FROM instances WHERE pk = %(pk)s
), f AS (
  UPDATE instances SET next_event_id = next_event_id + 1, updated_at = %(now)s, status = %(status)s,
         output = %(output)s::json, error = %(error)s::json, terminal_at = %(now)s, inbox_count = 0,
         inbox_bytes = 0, last_event_at = GREATEST(last_event_at, %(now)s)
  WHERE pk = %(pk)s AND epoch = %(epoch)s
  RETURNING next_event_id - 1 AS e0, next_sequence AS latest, last_event_at
), i AS (
  DELETE FROM inbox_events WHERE instance_pk = %(pk)s AND EXISTS (SELECT 1 FROM f)
), t AS (
  DELETE FROM timers WHERE instance_pk = %(pk)s AND EXISTS (SELECT 1 FROM f)
), h AS (
  INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)
  SELECT %(pk)s, f.e0, %(event_type)s, %(attributes)s::json, f.last_event_at FROM f
)
SELECT f.latest <> seen.seq FROM f, seen
"""
