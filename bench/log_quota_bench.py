"""Is the log store bounded under a log flood? (docs/spec/host-features.md#hf-neighbours: "a context printing a 1 Mi-character
burst, then sleeping 1 s for a fresh context, repeated" grew ``tenant_logs`` 1.4 MB → 36.5 MB in 17 s.)

Prints one JSON object. Each run is a scratch stack (``bench.engine_bench.Scratch``: its own
database, Redis namespace, ``takohost api`` and solo worker processes, plus a ``takohost beat``
for the sleeps' timers) whose one Space runs ``--attackers`` instances of :data:`FLOOD` for
``--seconds`` from its first stored line: each context prints 256 lines of 4,096 incompressible characters (1 Mi characters,
exactly one context's log budget), sleeps 1 s, and the next context does it again. Runs alternate
between no log quota (``TAKOHOST_QUOTA_LOG_BYTES=0``: the behaviour before quotas) and a quota of
``--quota-mib`` MiB, ``--rounds`` times each. Per run: the size of ``tenant_logs`` (table, TOAST
and indexes: ``pg_total_relation_size``) at the start, every second and at the end, the Space's
counted ``log_bytes``, lines stored, the marker lines and the lines they say were dropped, and how
many contexts ran a burst. The medians of each mode are under ``summary``.

    python -m bench.log_quota_bench                      # 17 s, 2 attackers, 4 MiB, 1 round
    python -m bench.log_quota_bench --seconds 30 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
import uuid

from bench import engine_bench

#: The attack: one burst of 1 Mi characters per context, then a 1 s sleep for a fresh context.
#: Lines are deterministic per (burst, line) and incompressible (hex of random bytes).
FLOOD = """
import random

class Flood:
    def __init__(self, env):
        pass
    def run(self, event, step):
        tag = event["params"]["tag"]
        for i in range(event["params"]["bursts"]):
            def burst(i=i):
                for j in range(256):
                    print(f"{tag}:{i:05d}:{j:03d}:" + random.Random(f"{tag}-{i}-{j}").randbytes(2048).hex()[: 4096 - 11 - len(tag)])
                return None
            step.do(f"burst {i}", burst)
            step.sleep(f"nap {i}", 1)
        return None
"""

MARKER = "lines dropped: the Space's log quota"


def _sizes(url: str, space: str) -> dict:
    import sqlalchemy as sa

    from models import db as models_db

    with models_db.session_scope(url) as session:
        row = session.execute(
            sa.text(
                """
SELECT pg_total_relation_size('tenant_logs'),
       (SELECT log_bytes FROM space_usage WHERE space = :s),
       (SELECT count(*) FROM tenant_logs WHERE stream = 'stdout'),
       (SELECT count(*) FROM tenant_logs WHERE stream = 'host' AND message LIKE '%' || :m),
       (SELECT COALESCE(sum(split_part(message, ' ', 1)::bigint), 0) FROM tenant_logs
         WHERE stream = 'host' AND message LIKE '%' || :m),
       (SELECT count(*) FROM steps WHERE kind = 'do' AND state = 'succeeded')
"""
            ),
            {"s": space, "m": MARKER},
        ).one()
    keys = ("tenantLogsBytes", "spaceLogBytes", "storedLines", "markerLines", "droppedLines", "bursts")
    return dict(zip(keys, (int(v or 0) for v in row), strict=True))


def one_run(*, quota: int, seconds: float, attackers: int) -> dict:
    """One scratch stack under the attack with ``TAKOHOST_QUOTA_LOG_BYTES=quota``."""
    from models import db as models_db
    from services import tokens

    os.environ["TAKOHOST_QUOTA_LOG_BYTES"] = str(quota)
    os.environ["TAKOHOST_SWEEP_INTERVAL_S"] = "1"
    scratch = engine_bench.Scratch(workers=attackers, concurrency=1)
    beat = scratch._start("beat", ["--loglevel=WARNING"])
    try:
        space = f"b{uuid.uuid4().hex[:10]}"
        with models_db.session_scope(scratch.url) as session:
            token = tokens.create_token_txn(session, space=space)
        uids = engine_bench.deploy(scratch.url, space, source=FLOOD, classes=("Flood",))
        client = engine_bench.Client(scratch.api_url, token, space)
        time.sleep(2.0)  # beat up
        start = _sizes(scratch.url, space)
        for n in range(attackers):
            client.post(f"/resources/{uids['Flood']}/instances", {"id": f"flood-{n}", "params": {"tag": f"f{n}", "bursts": 100000}})
        deadline = time.monotonic() + 120
        while _sizes(scratch.url, space)["storedLines"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)  # the clock starts at the first stored line (workers warm up at their pace)
        began = time.monotonic()
        series = []
        while time.monotonic() - began < seconds:
            time.sleep(1.0)
            series.append(_sizes(scratch.url, space)["tenantLogsBytes"])
        end = _sizes(scratch.url, space)
        return {
            "quotaBytes": quota,
            "seconds": round(time.monotonic() - began, 1),
            "start": start,
            "end": end,
            "tenantLogsBytesEverySecond": series,
            "tenantLogsMaxBytes": max(series + [end["tenantLogsBytes"]]),
        }
    finally:
        os.killpg(beat.pid, signal.SIGTERM)
        try:
            beat.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(beat.pid, signal.SIGKILL)
        scratch.close()


def run(args: argparse.Namespace) -> dict:
    """Alternate no-quota and quota runs ``args.rounds`` times; returns the runs and medians."""
    quota = int(args.quota_mib * (1 << 20))
    runs: dict[str, list[dict]] = {"noQuota": [], "quota": []}
    for _ in range(args.rounds):
        runs["noQuota"].append(one_run(quota=0, seconds=args.seconds, attackers=args.attackers))
        runs["quota"].append(one_run(quota=quota, seconds=args.seconds, attackers=args.attackers))

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] if key in r else r["end"][key] for r in runs[mode])

    summary = {
        mode: {
            "tenantLogsStartMB": round(statistics.median(r["start"]["tenantLogsBytes"] for r in runs[mode]) / 1e6, 2),
            "tenantLogsEndMB": round(med(mode, "tenantLogsBytes") / 1e6, 2),
            "tenantLogsMaxMB": round(med(mode, "tenantLogsMaxBytes") / 1e6, 2),
            "spaceLogBytesMB": round(med(mode, "spaceLogBytes") / 1e6, 2),
            "bursts": med(mode, "bursts"),
            "storedLines": med(mode, "storedLines"),
            "markerLines": med(mode, "markerLines"),
            "droppedLines": med(mode, "droppedLines"),
        }
        for mode in runs
    }
    return {
        "attack": "per context: 256 lines x 4096 characters (1 Mi), then step.sleep 1 s; repeated",
        "seconds": args.seconds,
        "attackers": args.attackers,
        "quotaMiB": args.quota_mib,
        "summary": summary,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=17.0)
    parser.add_argument("--attackers", type=int, default=2, help="instances (and solo workers) of the attack")
    parser.add_argument("--quota-mib", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=1)
    print(json.dumps(run(parser.parse_args(argv)), indent=2))


if __name__ == "__main__":
    main()
