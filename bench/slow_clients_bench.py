"""A victim's latency while hostile clients attack the API (docs/spec/host-features.md#hf-neighbours).

Prints one JSON object: the victim's GETs (a fresh connection each, one every 50 ms) measured
alone and under attack, alternately for ``--rounds`` rounds, and the medians over the rounds::

    {"attack": {"heads": 400, "bodies": 400, ...}, "rounds": [{"alone": {...}, "attacked": {...}}, ...],
     "median": {"alone_p50_ms", "attacked_p50_ms", "attacked_p99_ms", "failures"}}

The attack is ``tests.support.slow_clients``: ``--heads`` slowloris connections (a head that
never ends) and ``--bodies`` slow-body connections (a complete ``POST`` head with
``Content-Length: 1000000``, then one byte every ``--interval`` seconds), half anonymous and half
with the token, reopened whenever the server closes one.

    python -m bench.slow_clients_bench --url http://127.0.0.1:8080 --token TOKEN --space SPACE
    python -m bench.slow_clients_bench --self-host    # scratch database + its own API (as bench.api_bench)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import urllib.parse

from tests.support import slow_clients


def _round(url: str, *, token: str, space: str, args: argparse.Namespace) -> dict:
    listing = f"{url}/v2/spaces/{space}/resources"
    alone = slow_clients.victim(listing, token=token, seconds=args.seconds).summary()
    parts = urllib.parse.urlsplit(url)
    attack = slow_clients.SlowClients((parts.hostname, parts.port), space=space, token=token,
                                      heads=args.heads, bodies=args.bodies, interval=args.interval)
    attack.start()
    try:
        time.sleep(1.0)
        attacked = slow_clients.victim(listing, token=token, seconds=args.seconds).summary()
    finally:
        attack.stop()
    statuses = sorted({answer.split(b" ", 2)[1].decode() for _, answer in attack.answers if b" " in answer})
    return {"alone": alone, "attacked": attacked, "attack_connections_opened": attack.opened,
            "attack_connect_errors": attack.connect_errors, "statuses_sent_to_attackers": statuses}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 if a victim request failed under attack."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--space")
    parser.add_argument("--self-host", action="store_true")
    parser.add_argument("--heads", type=int, default=400)
    parser.add_argument("--bodies", type=int, default=400)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between two bytes of one attacker")
    parser.add_argument("--seconds", type=float, default=20.0, help="of each measurement")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    slow_clients.raise_fd_limit(args.heads + args.bodies + 1024)
    with contextlib.ExitStack() as stack:
        if args.self_host:
            from bench import api_bench

            url, token, space = stack.enter_context(api_bench.self_hosted())
        else:
            if not (args.url and args.token and args.space):
                parser.error("--url, --token and --space, or --self-host")
            url, token, space = args.url, args.token, args.space
        rounds = [_round(url, token=token, space=space, args=args) for _ in range(args.rounds)]
    median = {
        "alone_p50_ms": statistics.median(r["alone"]["p50_ms"] for r in rounds),
        "attacked_p50_ms": statistics.median(r["attacked"]["p50_ms"] or float("inf") for r in rounds),
        "attacked_p99_ms": statistics.median(r["attacked"]["p99_ms"] or float("inf") for r in rounds),
        "failures": sum(r["attacked"]["failures"] for r in rounds),
    }
    print(json.dumps({"attack": {"heads": args.heads, "bodies": args.bodies, "interval_s": args.interval,
                                 "seconds": args.seconds}, "rounds": rounds, "median": median}))
    return 1 if median["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
