"""The API's two hot service calls in one process, without HTTP or a worker (docs/spec/host-features.md#hf-performance):
``instances.create`` and ``instance_events.send_event`` to a waiting instance (the event goes
straight to its wait and wakes it), one call at a time against a scratch database.

    python -m bench.service_bench                        # this checkout
    python -m bench.service_bench --against ../other     # alternating with another checkout's
                                                         # service modules, in this process

``--against`` loads ``services/instances.py`` (``workers/services/`` in checkouts before the move) and ``instance_events.py`` of the other
checkout under other names beside this checkout's, and alternates batches of 25 calls between
them, so that both see the same machine at the same moment (the machine's speed moves by up to 2×
within minutes: separate runs cannot show a 0.3 ms difference). Everything else, the SQL
included, is this checkout's: it compares the two modules' code only. Dispatching the context is
replaced by a no-op (the message is not what is measured). Prints one JSON object: per variant,
the latency p50/mean of each call (milliseconds) and this thread's CPU per call
(``time.thread_time``: the client side only; the Postgres backend is not counted). Needs the local
Postgres (``TAKOHOST_TEST_PG``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from types import ModuleType

ADMIN_URL = os.environ.get("TAKOHOST_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BATCH = 25


def _load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _measure(
    calls: int, variants: dict[str, Callable[[int], None]]
) -> dict[str, dict[str, float]]:
    """``calls`` calls per variant, in alternating batches; per variant p50/mean ms and CPU ms."""
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu = dict.fromkeys(variants, 0.0)
    names = list(variants)
    index = 0
    for batch in range(calls // BATCH):
        for name in names if batch % 2 == 0 else names[::-1]:
            call = variants[name]
            started_cpu = time.thread_time()
            for _ in range(BATCH):
                started = time.perf_counter()
                call(index)
                wall[name].append(time.perf_counter() - started)
                index += 1
            cpu[name] += time.thread_time() - started_cpu
    return {
        name: {
            "p50_ms": round(statistics.median(values) * 1000, 3),
            "mean_ms": round(statistics.mean(values) * 1000, 3),
            "cpu_ms": round(cpu[name] / len(values) * 1000, 3),
        }
        for name, values in wall.items()
    }


def run(calls: int, against: str | None) -> dict:
    """Measure on a scratch database (dropped after); returns the JSON result."""
    import sqlalchemy as sa

    name = f"takohost_service_{uuid.uuid4().hex[:8]}"
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    os.environ["TAKOHOST_DATABASE_URL"] = url
    os.environ["TAKOHOST_NAMESPACE"] = f"tks{uuid.uuid4().hex[:8]}"
    from models import db as models_db

    try:
        from bench import engine_bench
        from models import migrate
        from services import dispatch, instance_events, instances, tokens

        migrate.upgrade(url)
        with models_db.session_scope(url) as session:
            tokens.create_token_txn(session, space="bench")
        uids = engine_bench.deploy(url, "bench")
        dispatch.run_context = lambda pk, **_: None  # every module's ``dispatch`` is this one
        modules = {"this": (instances, instance_events)}
        if against:
            services = os.path.join(os.path.abspath(against), "services")
            if not os.path.exists(os.path.join(services, "instances.py")):  # before the move
                services = os.path.join(os.path.abspath(against), "workers", "services")
            modules["against"] = (
                _load(os.path.join(services, "instances.py"), "bench_against_instances"),
                _load(os.path.join(services, "instance_events.py"), "bench_against_instance_events"),
            )
        for create_mod, _ in modules.values():  # warm-up: connections, prepared statements
            for i in range(10):
                create_mod.create(space="bench", workflow_uid=uids["One"], instance_id=f"warm-{id(create_mod)}-{i}")
        total = calls * len(modules)
        waiting = [f"w{i}" for i in range(total)]
        for instance_id in waiting:
            instances.create(space="bench", workflow_uid=uids["Waiter"], instance_id=instance_id)
        # Each waits on its wait "w" for an event "go" (a day's timeout, with its timer).
        with models_db.session_scope(url) as session:
            conn = session.connection()
            conn.exec_driver_sql(
                "UPDATE instances SET status = 'waiting' WHERE workflow_uid = %(uid)s", {"uid": uids["Waiter"]}
            )
            conn.exec_driver_sql(
                "INSERT INTO steps (instance_pk, name, kind, state, attempts, config, timeout_at, created_at,"
                " updated_at) SELECT pk, convert_to('w', 'UTF8'), 'wait', 'pending', 0,"
                " '{\"type\": \"go\", \"timeoutSeconds\": 86400}'::json, now() + interval '1 day', now(), now()"
                " FROM instances WHERE workflow_uid = %(uid)s",
                {"uid": uids["Waiter"]},
            )
            conn.exec_driver_sql(
                "INSERT INTO timers (instance_pk, kind, due_at, created_at)"
                " SELECT pk, 'timeout', now() + interval '1 day', now() FROM instances WHERE workflow_uid = %(uid)s",
                {"uid": uids["Waiter"]},
            )
        run_id = uuid.uuid4().hex[:6]
        create = _measure(
            calls,
            {
                label: (
                    lambda i, m=create_mod: m.create(space="bench", workflow_uid=uids["One"], instance_id=f"{run_id}-{i}")
                )
                for label, (create_mod, _) in modules.items()
            },
        )
        send = _measure(
            calls,
            {
                label: (
                    lambda i, m=events_mod: m.send_event(
                        space="bench", workflow_uid=uids["Waiter"], instance_id=waiting[i], event_type="go"
                    )
                )
                for label, (_, events_mod) in modules.items()
            },
        )
        with models_db.session_scope(url) as session:
            woken = session.scalar(
                sa.text("SELECT count(*) FROM instances WHERE workflow_uid = :uid AND status = 'running'"),
                {"uid": uids["Waiter"]},
            )
        assert woken == calls * len(modules), f"only {woken} waits took their event"
        return {
            "calls_per_variant": calls,
            "create": create,
            "send_event_to_a_waiting_instance": send,
            "load_average": os.getloadavg(),
        }
    finally:
        models_db.dispose_all()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: print one JSON object."""
    parser = argparse.ArgumentParser(prog="bench.service_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls of each kind per variant (default 1000)")
    parser.add_argument("--against", help="another checkout whose service modules to alternate with")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.calls, args.against)))


if __name__ == "__main__":
    main()
