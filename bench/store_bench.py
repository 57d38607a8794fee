"""Per-step commit cost of the engine store: raw psycopg vs SQLAlchemy (docs/spec/host-features.md#hf-one-stack).

A replay context commits each finished ``step.do`` once (``ContextStore.commit_attempt``: the
fenced ``UPDATE instances`` with the step upsert and two history rows). This bench times that
commit, and the context start, on a scratch database of the local Postgres:

* ``psycopg``: the engine's store (``workers.engine.store``), one statement in autocommit mode;
* ``sqla_text``: the very same statement through a SQLAlchemy Core connection
  (``exec_driver_sql`` on a pooled engine, one transaction per commit): what SQLAlchemy's layer
  costs for the same SQL.

    python -m bench.store_bench                   # 2000 steps per variant
    python -m bench.store_bench --steps 5000

Prints one JSON object: per variant, p50/p99/mean microseconds per step commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time
import uuid

import sqlalchemy as sa

ADMIN_URL = os.environ.get("TAKOHOST_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _instance(url: str) -> int:
    """A fresh queued instance (no workflow needed: the store's writes read only the instance)."""
    from models import db as models_db

    now = dt.datetime.now(dt.UTC)
    with models_db.get_engine(url).begin() as conn:
        return conn.execute(
            sa.text(
                "INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, step_count,"
                " next_event_id, next_sequence, inbox_count, inbox_bytes, created_at, updated_at,"
                " lifetime_ends_at, last_event_at)"
                " VALUES (:w, 'bench', :i, 'queued', 0, 0, 1, 1, 0, 0, :now, :now, :end, :now) RETURNING pk"
            ),
            {
                "w": str(uuid.uuid4()),
                "i": uuid.uuid4().hex.encode(),
                "now": now,
                "end": now + dt.timedelta(days=365),
            },
        ).scalar_one()


class _SqlaConn:
    """A psycopg-connection look-alike that runs each statement through SQLAlchemy Core."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def execute(self, sql: str, params: dict) -> sa.CursorResult:
        with self.engine.begin() as conn:
            result = conn.exec_driver_sql(sql, params)
            rows = result.fetchall()
        return _Rows(rows)


class _Rows:
    def __init__(self, rows: list) -> None:
        self.rows = rows

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None


def _store(variant: str, url: str, pk: int, lifetime: dt.datetime):
    from models import db as models_db
    from workers.engine import store

    if variant == "psycopg":
        return store.backend_for(url).context_store(pk=pk, lifetime_ends_at=lifetime)
    conn = _SqlaConn(models_db.get_engine(url))
    return store.ContextStore(conn, pk=pk, lifetime_ends_at=lifetime)  # type: ignore[arg-type]


def run(variant: str, url: str, steps: int) -> dict:
    from takohost.domain import decide, retry

    first_attempt = decide.RunEffect(attempt=1, policy=retry.parse_retry_policy({"maxAttempts": 1}), new=True)
    lifetime = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    timings = []
    per_instance = 100
    for base in range(0, steps, per_instance):
        ctx = _store(variant, url, _instance(url), lifetime)
        assert ctx.start(version_uid=str(uuid.uuid4()), now=dt.datetime.now(dt.UTC))
        for i in range(base, min(steps, base + per_instance)):
            now = dt.datetime.now(dt.UTC)
            began = time.perf_counter()
            ctx.commit_attempt(
                name=f"s{i}",
                run=first_attempt,
                started_at=now,
                outcome=decide.AttemptSucceeded(result={"i": i}),
                now=now,
            )
            timings.append((time.perf_counter() - began) * 1e6)
    timings.sort()
    return {
        "p50_us": round(statistics.median(timings)),
        "p99_us": round(timings[int(len(timings) * 0.99) - 1]),
        "mean_us": round(statistics.fmean(timings)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    from models import migrate

    name = f"tkbench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        result = {}
        for variant in ("psycopg", "sqla_text", "psycopg", "sqla_text"):  # twice: the 2nd is warm
            result[variant] = run(variant, url, args.steps)
        print(json.dumps({"steps": args.steps, **result}))
    finally:
        from models import db as models_db

        models_db.discard_connection(url)
        models_db.dispose_all()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
