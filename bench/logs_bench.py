"""Does tenant log capture cost the engine? (docs/spec/host-features.md#hf-observability: "a chatty effect (100,000 lines)
cannot stall the engine or blow up memory: measure steps/s with and without it").

Prints one JSON object. On a scratch stack (``bench.engine_bench.Scratch``: its own database,
Redis namespace, ``takohost api`` and worker processes), three runs of ``--instances`` instances
of a 10-step workflow with trivial effects, created at once over HTTP:

* ``quiet``: the effects print nothing;
* ``printing``: every effect prints one line (one line per step: the common case);
* ``quiet_beside_chatty``: the quiet workflow again while ``--chatty`` instances run an effect
  that prints 100,000 lines each, started just before.

The three are interleaved ``--rounds`` times (after 20 warm-up instances), so a change of load
on a shared machine hits each of them. For each: steps/s of the 10-step instances per round
(steps / (last terminal − first create)), and the workers' peak resident memory (``VmHWM`` of every worker process and its pool children, MiB).
For the chatty instances: seconds from create to complete, lines stored and the dropped-lines
markers (the budget at work).

    python -m bench.logs_bench                    # 200 instances, 2 chatty, 2 solo workers
    python -m bench.logs_bench --instances 500 --chatty 4
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time
import uuid

from bench import engine_bench, proc_cpu

SOURCE = """
class Ten:
    def __init__(self, env):
        pass
    def run(self, event, step):
        for i in range(10):
            step.do(f"s{i}", lambda: {"i": i})
        return None

class TenPrinting:
    def __init__(self, env):
        pass
    def run(self, event, step):
        def effect(i):
            print("step", i, "of", event["instanceId"])
            return {"i": i}
        for i in range(10):
            step.do(f"s{i}", lambda: effect(i))
        return None

class Chatty:
    def __init__(self, env):
        pass
    def run(self, event, step):
        def effect():
            for i in range(100000):
                print("chatty line", i, "with some text to make it longer than a few bytes")
            return {"lines": 100000}
        step.do("chatty", effect)
        return None
"""
CLASSES = ("Ten", "TenPrinting", "Chatty")


def deploy(url: str, space: str) -> dict[str, str]:
    """Worker, Version (``SOURCE``), Deployment and one DurableWorkflow per class: {class: uid}."""
    return engine_bench.deploy(url, space, source=SOURCE, classes=CLASSES)


def peak_rss_mib(roots: list[int]) -> float:
    """Sum of ``VmHWM`` (peak resident set) over the worker process trees of ``roots``, in MiB
    (the zygote and the sandbox children are tenant memory, under their own limits: skipped)."""
    total = 0
    for root in roots:
        tree = proc_cpu.roles(root)
        for pid in tree["root"] + tree["processes"]:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            total += int(line.split()[1])
            except OSError:
                continue
    return round(total / 1024, 1)


def _steps_per_s(url: str, workflow: str, ids: list[str], created: list[float]) -> float:
    last = max(engine_bench.terminal_seconds(url, workflow, i) for i in ids)
    return round(10 * len(ids) / (last - min(created)), 1)


def _burst(client: engine_bench.Client, workflow: str, ids: list[str]) -> list[float]:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda i: client.create(workflow, i), ids))


def _chatty_lines(url: str, workflow: str, ids: list[str]) -> dict:
    import sqlalchemy as sa

    from models import db as models_db

    with models_db.session_scope(url) as session:
        rows = session.execute(
            sa.text(
                "SELECT l.stream, count(*), sum(CASE WHEN l.stream = 'host' AND l.message LIKE '%dropped%'"
                " THEN split_part(l.message, ' ', 1)::bigint ELSE 0 END)"
                " FROM tenant_logs l JOIN instances i ON i.pk = l.instance_pk"
                " WHERE i.workflow_uid = :w AND i.instance_id = ANY(:ids) GROUP BY l.stream"
            ),
            {"w": workflow, "ids": ids},
        ).all()
    return {stream: {"lines": count, "droppedCounted": int(dropped)} for stream, count, dropped in rows}


def run(args: argparse.Namespace) -> dict:
    """Run the three scenarios on one scratch stack; returns the JSON-able result."""
    from models import db as models_db
    from services import tokens

    scratch = engine_bench.Scratch(workers=args.workers, concurrency=args.concurrency)
    try:
        space = "bench"
        with models_db.session_scope(scratch.url) as session:
            token = tokens.create_token_txn(session, space=space)
        uids = deploy(scratch.url, space)
        client = engine_bench.Client(scratch.api_url, token, space)
        roots = [w.pid for w in scratch.workers]
        result: dict = {"instances": args.instances, "stepsPerInstance": 10, "chatty": args.chatty,
                        "workers": args.workers, "concurrency": args.concurrency, "rounds": args.rounds}
        warm = [f"warm-{n}" for n in range(20)]  # zygotes, connections, caches: not measured
        _burst(client, uids["Ten"], warm)
        engine_bench.wait_all(scratch.url, uids["Ten"], warm, status="complete", timeout=args.timeout)
        for scenario in ("quiet", "printing", "quiet_beside_chatty"):
            result[scenario] = {"stepsPerSecond": [], "workersPeakRssMiB": 0.0}
        chatty_all: list[str] = []
        chatty_seconds: list[float] = []
        for _ in range(args.rounds):  # the scenarios interleaved: a load change hits all of them
            for scenario, workflow in (("quiet", "Ten"), ("printing", "TenPrinting"), ("quiet_beside_chatty", "Ten")):
                chatty: list[str] = []
                if scenario == "quiet_beside_chatty":
                    chatty = [f"chatty-{uuid.uuid4().hex[:8]}-{n}" for n in range(args.chatty)]
                    chatty_created = _burst(client, uids["Chatty"], chatty)
                ids = [f"{scenario}-{uuid.uuid4().hex[:8]}-{n}" for n in range(args.instances)]
                created = _burst(client, uids[workflow], ids)
                engine_bench.wait_all(scratch.url, uids[workflow], ids, status="complete", timeout=args.timeout)
                result[scenario]["stepsPerSecond"].append(_steps_per_s(scratch.url, uids[workflow], ids, created))
                if chatty:
                    engine_bench.wait_all(scratch.url, uids["Chatty"], chatty, status="complete", timeout=args.timeout)
                    chatty_all += chatty
                    chatty_seconds += [
                        round(engine_bench.terminal_seconds(scratch.url, uids["Chatty"], i) - c, 2)
                        for i, c in zip(chatty, chatty_created, strict=True)
                    ]
                result[scenario]["workersPeakRssMiB"] = peak_rss_mib(roots)
        chatty = chatty_all
        result["chattyInstances"] = {
            "secondsToComplete": chatty_seconds,
            "linesWrittenPerInstance": 100000,
            "stored": _chatty_lines(scratch.url, uids["Chatty"], chatty),
        }
        return result
    finally:
        scratch.close()


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--chatty", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("TAKOHOST_SPACE_MAX_CONTEXTS", "0")
    started = time.time()
    result = run(args)
    result["benchSeconds"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
