"""How the host's cost grows with what it holds (docs/spec/host-features.md#hf-performance). Prints one JSON object.

    python -m bench.scale_bench                  # the issue's sizes (10×) and a tenth of them (1×)
    python -m bench.scale_bench --scale 0.1      # a quick run: every size ÷ 10
    python -m bench.scale_bench --only idle,list # some scenarios only

Scenarios, each at 1× (a tenth of the target) and 10× (the target, times ``--scale``):

* ``idle``: 100,000 sleeping instances (waking in an hour): % CPU of every host process over
  ``--idle-seconds`` (default 60 s: API, worker supervisor/processes/sandbox, beat, the host's
  Postgres backends; from ``/proc``) and the worker processes' resident memory.
* ``wake``: 10,000 sleeps due at the same instant: lateness (p50/p99/max) of each woken
  context's start (its ``ContextStarted``) and of its first effect, and the drain time.
* ``cron``: 10,000 triggers on ``* * * * *`` through ``bench.cron_bench`` (one minute): matches
  recorded and their recording lateness, delivery-start spread.
* ``list``: one workflow with 1,000,000 instances: ``GET …/instances`` pages (limit 100) at the
  first page, the middle and the end (keyset ``pageToken``), with and without a ``status`` filter
  that matches nothing: p50/max milliseconds over HTTP (target ≤ 50 ms at any depth).
* ``history``: an instance with 1,024 steps: ``GET …/history`` pages at the start, middle, end.

Data is seeded with bulk SQL: one template instance is run to ``sleeping`` by the real engine,
then its rows (instance, steps, history, timers) are copied ``N`` times with ``INSERT … SELECT …
generate_series`` — so every copy is exactly what the engine writes. The stack is
``bench.engine_bench.Scratch`` (``takohost api``, ``takohost worker --concurrency 2``) plus
``takohost beat``. Report the machine load (``load_average``) next to the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time

import sqlalchemy as sa

from bench import engine_bench, proc_cpu

SLEEPER = """
import time
class Sleeper:
    def __init__(self, env):
        pass
    def run(self, event, step):
        step.sleep("nap", 3600)
        return step.do("after", lambda: {"t": time.time()})
"""

SCENARIOS = ("idle", "wake", "list", "history", "cron")
TARGETS = {"idle": 100_000, "wake": 10_000, "list": 1_000_000, "history": 1_024, "cron": 10_000}


def _columns(conn: sa.Connection, table: str) -> list[str]:
    return list(conn.execute(sa.text(
        "SELECT column_name FROM information_schema.columns WHERE table_name = :t AND column_name <> 'pk'"
        " ORDER BY ordinal_position"), {"t": table}).scalars())


def clone(url: str, *, template_pk: int, count: int, prefix: str) -> None:
    """Copy instance ``template_pk`` with its steps, history and timers ``count`` times (ids
    ``{prefix}{n}``), in one transaction."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        cols = _columns(conn, "instances")
        select = ", ".join("convert_to(:prefix || g, 'UTF8')" if c == "instance_id" else f"t.{c}" for c in cols)
        conn.execute(sa.text("CREATE TEMP TABLE new_pks (pk bigint) ON COMMIT DROP"))
        conn.execute(sa.text(
            f"WITH new AS (INSERT INTO instances ({', '.join(cols)}) SELECT {select} FROM instances t,"
            f" generate_series(1, :n) g WHERE t.pk = :tpl RETURNING pk) INSERT INTO new_pks SELECT pk FROM new"),
            {"prefix": prefix, "n": count, "tpl": template_pk})
        for table in ("steps", "history_events", "timers"):
            cols = [c for c in _columns(conn, table) if c != "instance_pk"]
            conn.execute(sa.text(
                f"INSERT INTO {table} (instance_pk, {', '.join(cols)}) SELECT n.pk, {', '.join('s.' + c for c in cols)}"
                f" FROM new_pks n CROSS JOIN {table} s WHERE s.instance_pk = :tpl"), {"tpl": template_pk})
    engine.dispose()


def _host_cpu_percent(before: dict, after: dict, seconds: float) -> dict:
    keys = sorted(set(before) | set(after))
    out = {key: round((after.get(key, 0) - before.get(key, 0)) * 100 / seconds, 2) for key in keys}
    out["total"] = round(sum(out.values()), 2)
    return out


def _rss_mib(root: int) -> float:
    total = 0
    for pid in proc_cpu.tree(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return round(total / 1024, 1)


class Stack:
    """The scratch stack with beat, a token, the Sleeper workflow and one template sleeping."""

    def __init__(self) -> None:
        from models import db as models_db
        from services import tokens

        os.environ.setdefault("TAKOHOST_SWEEP_INTERVAL_S", "5")
        self.scratch = engine_bench.Scratch(workers=1, concurrency=2, pool="solo")
        self.beat = self.scratch._start("beat", ["--loglevel=WARNING"])
        self.url = self.scratch.bench_url
        with models_db.session_scope(self.url) as session:
            token = tokens.create_token_txn(session, space="bench")
        self.workflow = _deploy_with(self.url)
        self.client = engine_bench.Client(self.scratch.api_url, token, "bench")
        self.client.create(self.workflow, "template")
        engine_bench.wait_all(self.url, self.workflow, ["template"], status="sleeping", timeout=60)
        self.template = self.pk("template")

    def pk(self, instance_id: str) -> int:
        with sa.create_engine(self.url, poolclass=sa.pool.NullPool).connect() as conn:
            return conn.execute(sa.text("SELECT pk FROM instances WHERE workflow_uid = :w AND instance_id = :i"),
                                {"w": self.workflow, "i": instance_id.encode()}).scalar_one()

    def roots(self) -> dict[str, int]:
        return {**self.scratch.roots(), "beat": self.beat.pid}

    def close(self) -> None:
        import signal

        os.killpg(self.beat.pid, signal.SIGTERM)
        self.beat.wait(20)
        self.scratch.close()


def _deploy_with(url: str) -> str:
    """Deploy a Version with the Sleeper class; returns its DurableWorkflow's uid."""
    return engine_bench.deploy(url, "bench", source=SLEEPER, classes=("Sleeper",))["Sleeper"]


def scenario_idle(stack: Stack, count: int, seconds: float) -> dict:
    """``count`` more sleeping instances (on top of earlier runs'); host % CPU while idle."""
    clone(stack.url, template_pk=stack.template, count=count, prefix=f"idle{count}-")
    time.sleep(5)  # let the clone's autovacuum/analyze and any sweep settle
    backends = proc_cpu.Backends(stack.scratch.backends)
    before = {**proc_cpu.snapshot(stack.roots()), "postgres_backends": 0.0}
    time.sleep(seconds)
    after = {**proc_cpu.snapshot(stack.roots()), "postgres_backends": backends.seconds()}
    return {"sleeping_instances_added": count, "idle_seconds": seconds,
            "host_cpu_percent": _host_cpu_percent(before, after, seconds),
            "worker_rss_mib": _rss_mib(stack.scratch.workers[0].pid)}


def scenario_wake(stack: Stack, count: int, lead: float = 5.0) -> dict:
    """``count`` sleeping copies all due at one instant ``lead`` s after seeding; their lateness."""
    prefix = f"wake{count}-"
    clone(stack.url, template_pk=stack.template, count=count, prefix=prefix)
    engine = sa.create_engine(stack.url, poolclass=sa.pool.NullPool)
    due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lead)
    with engine.begin() as conn:
        pks = "SELECT pk FROM instances WHERE workflow_uid = :w AND instance_id >= convert_to(:p, 'UTF8')" \
              " AND instance_id < convert_to(:q, 'UTF8')"
        args = {"w": stack.workflow, "p": prefix, "q": prefix[:-1] + ".", "due": due}
        conn.execute(sa.text(f"UPDATE timers SET due_at = :due WHERE kind = 'wake' AND instance_pk IN ({pks})"), args)
        conn.execute(sa.text(f"UPDATE steps SET wake_at = :due WHERE kind = 'sleep' AND instance_pk IN ({pks})"), args)
    deadline = time.monotonic() + lead + 60 + count * 0.1
    while True:
        with engine.connect() as conn:
            done = conn.execute(sa.text(f"SELECT count(*) FROM instances WHERE status = 'complete' AND pk IN ({pks})"),
                                args).scalar_one()
        if done == count or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    with engine.connect() as conn:
        started = list(conn.execute(sa.text(
            f"SELECT max(event_timestamp) FROM history_events WHERE event_type = 'ContextStarted'"
            f" AND instance_pk IN ({pks}) GROUP BY instance_pk"), args).scalars())
        effects = [row[0]["t"] for row in conn.execute(sa.text(
            f"SELECT output FROM instances WHERE status = 'complete' AND pk IN ({pks})"), args)]
    engine.dispose()
    start_late = [(at - due).total_seconds() for at in started]
    effect_late = [t - due.timestamp() for t in effects]
    return {"sleeps_due_at_once": count, "completed": done,
            "context_start_lateness": _seconds_summary(start_late),
            "first_effect_lateness": _seconds_summary(effect_late),
            "drain_seconds": round(max(effect_late), 2) if effect_late else None,
            "contexts_per_s": round(done / max(effect_late), 1) if effect_late else None}


def _seconds_summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"p50_ms": round(statistics.median(values) * 1000, 1),
            "p99_ms": round(engine_bench.percentile(values, 0.99) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1), "n": len(values)}


def _timed_get(stack: Stack, path: str, repeat: int = 15) -> dict:
    import http.client

    conn = http.client.HTTPConnection(stack.client.host, stack.client.port, timeout=60)
    times = []
    body = None
    for _ in range(repeat):
        started = time.perf_counter()
        conn.request("GET", f"/v2/spaces/bench{path}", headers=stack.client.headers)
        response = conn.getresponse()
        raw = response.read()
        times.append(time.perf_counter() - started)
        assert response.status == 200, (response.status, raw[:300])
        body = json.loads(raw)
    conn.close()
    return {"p50_ms": round(statistics.median(times) * 1000, 2), "max_ms": round(max(times) * 1000, 2),
            "body": body}


def scenario_list(stack: Stack, count: int) -> dict:
    """A workflow with ``count`` instances (bulk rows): list pages at the start, middle and end."""
    from services import instance_pages

    workflow, other = _deploy_with(stack.url), _deploy_with(stack.url)
    engine = sa.create_engine(stack.url, poolclass=sa.pool.NullPool)
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        # Interleaved with as many rows of another workflow (a shared table), and one instance
        # in ten of the listed workflow errored (the status filter's rows are spread out).
        conn.execute(sa.text(
            "INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, step_count, next_event_id,"
            " next_sequence, inbox_count, inbox_bytes, created_at, updated_at, lifetime_ends_at, terminal_at)"
            " SELECT CASE WHEN g % 2 = 0 THEN :w ELSE :o END, 'bench', convert_to('l' || g, 'UTF8'),"
            " CASE WHEN g % 20 = 0 THEN 'errored' ELSE 'complete' END, 1, 0, 1, 1, 0, 0, :now, :now,"
            " :now, :now FROM generate_series(1, 2 * :n) g"), {"w": workflow, "o": other, "now": now, "n": count})
        conn.execute(sa.text("ANALYZE instances"))
        low, high = conn.execute(sa.text("SELECT min(pk), max(pk) FROM instances WHERE workflow_uid = :w"),
                                 {"w": workflow}).one()
    engine.dispose()
    base = f"/resources/{workflow}/instances?limit=100"
    out = {"instances": count}
    for name, after in (("first", None), ("middle", (low + high) // 2), ("end", high - 50)):
        token = "" if after is None else f"&pageToken={instance_pages.encode_token(after)}"
        page = _timed_get(stack, base + token)
        filtered = _timed_get(stack, base + "&status=errored" + token)  # one in ten
        out[name] = {"page": {k: page[k] for k in ("p50_ms", "max_ms")},
                     "rows": len(page["body"]["instances"]),
                     "status_filter_one_in_ten": {k: filtered[k] for k in ("p50_ms", "max_ms")},
                     "sql_ms": _explain_ms(stack, workflow, after),
                     "sql_ms_status_filter": _explain_ms(stack, workflow, after, status="errored")}
    return out


def _explain_ms(stack: Stack, workflow: str, after: int | None, status: str | None = None) -> float:
    """The list's query as the checkout under test builds it, timed in Postgres (``EXPLAIN
    ANALYZE``), milliseconds."""
    from services import instances

    engine = sa.create_engine(stack.url, poolclass=sa.pool.NullPool)
    if hasattr(instances, "_page_query"):
        query = instances._page_query(workflow_uid=workflow, status=status, after=after or 0, size=101)
        sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
        params: dict = {}
    else:  # the code before keyset paging: WHERE workflow_uid [AND status] [AND pk >] ORDER BY pk
        sql = ("SELECT pk, instance_id, status, created_at FROM instances WHERE workflow_uid = :w"
               + (" AND status = :s" if status else "") + (" AND pk > :a" if after else "") + " ORDER BY pk LIMIT 101")
        params = {"w": workflow, "s": status, "a": after}
    with engine.connect() as conn:
        plan = conn.execute(sa.text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params).scalar_one()
    engine.dispose()
    return round(plan[0]["Execution Time"], 2)


def scenario_history(stack: Stack, steps: int) -> dict:
    """An instance with ``steps`` completed steps (two history events each): history pages."""
    from services import instance_pages

    instance_id = f"hist{steps}"
    stack.client.create(stack.workflow, instance_id)
    engine_bench.wait_all(stack.url, stack.workflow, [instance_id], status="sleeping", timeout=60)
    pk = stack.pk(instance_id)
    engine = sa.create_engine(stack.url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        first = conn.execute(sa.text("SELECT next_event_id FROM instances WHERE pk = :pk"), {"pk": pk}).scalar_one()
        conn.execute(sa.text(
            "INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)"
            " SELECT :pk, :first + g, CASE WHEN g % 2 = 0 THEN 'StepAttemptStarted' ELSE 'StepCompleted' END,"
            " json_build_object('name', 's' || (g / 2), 'attempt', 1), now() FROM generate_series(0, :n - 1) g"),
            {"pk": pk, "first": first, "n": steps * 2})
        conn.execute(sa.text("UPDATE instances SET next_event_id = next_event_id + :n WHERE pk = :pk"),
                     {"pk": pk, "n": steps * 2})
        last = first + steps * 2 - 1
    engine.dispose()
    base = f"/resources/{stack.workflow}/instances/{instance_id}/history?limit=100"
    out = {"steps": steps, "events": last}
    for name, after in (("first", None), ("middle", (first + last) // 2), ("end", max(first, last - 50))):
        token = "" if after is None else f"&pageToken={instance_pages.encode_token(after)}"
        page = _timed_get(stack, base + token)
        out[name] = {**{k: page[k] for k in ("p50_ms", "max_ms")}, "rows": len(page["body"]["events"])}
    return out


def scenario_cron(triggers: int) -> dict:
    """``bench.cron_bench`` with ``triggers`` triggers on ``* * * * *`` for one minute."""
    done = subprocess.run([sys.executable, "-m", "bench.cron_bench", "--triggers", str(triggers), "--minutes", "1"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"triggers": triggers, "error": done.stderr[-2000:]}
    report = json.loads(done.stdout[done.stdout.index("{"):])
    return {"triggers": triggers, "totals": report["totals"],
            "perMinute": [{k: m[k] for k in ("matchesRecorded", "recordLatenessMs", "deliveryStartLatenessMs")}
                          for m in report["perMinute"]]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (0.1: a quick run)")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    args = parser.parse_args(argv)
    chosen = [name for name in args.only.split(",") if name]
    sizes = {name: max(1, int(TARGETS[name] * args.scale)) for name in SCENARIOS}
    out: dict = {"scale": args.scale, "load_average_start": os.getloadavg()}
    stack = Stack() if set(chosen) - {"cron"} else None
    try:
        for name in chosen:
            if name == "cron":
                continue
            runs = {}
            for label, size in (("1x", max(1, sizes[name] // 10)), ("10x", sizes[name])):
                if name == "idle":  # cumulative: 1× copies, then the rest up to 10×
                    added = size if label == "1x" else size - max(1, sizes[name] // 10)
                    runs[label] = {**scenario_idle(stack, added, args.idle_seconds), "sleeping_total": size}
                elif name == "wake":
                    runs[label] = scenario_wake(stack, size)
                elif name == "list":
                    runs[label] = scenario_list(stack, size)
                else:
                    runs[label] = scenario_history(stack, size)
                runs[label]["load_average"] = os.getloadavg()
                print(json.dumps({name: {label: runs[label]}}), file=sys.stderr, flush=True)
            out[name] = runs
    finally:
        if stack is not None:
            stack.close()
    if "cron" in chosen:
        out["cron"] = {"1x": scenario_cron(max(1, sizes["cron"] // 10)), "10x": scenario_cron(sizes["cron"])}
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
