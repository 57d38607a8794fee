"""The log flood of docs/spec/host-features.md#hf-neighbours (item 4) through real processes: a tenant whose every context prints a
1 Mi-character burst (exactly one context's log budget), then sleeps 1 s for a fresh context and a
fresh budget, repeated. Before quotas this grew ``tenant_logs`` without bound (1.4 MB → 36.5 MB in
17 s on two slots; ``bench.log_quota_bench`` reproduces it: 26 MB in 17 s here).

Real API, two solo workers and a beat on a private database, with a log quota of ``QUOTA`` bytes
for these processes only. Two attacker instances of ``bench.log_quota_bench.FLOOD`` run
``BURSTS`` contexts each, side by side. Then: the Space's counted log bytes pass the quota only by
the marker lines, the physical table stays within a small multiple of it, each context says what
it dropped in at most **one** marker line (whose counts, with the stored lines, add up to every line
printed: nothing vanishes unsaid), every stored line is byte-exact what the tenant printed (nothing
accepted was lost or corrupted), the counters equal a recount, and another Space's lines are all
kept.
"""

from __future__ import annotations

import random
import re
import uuid

import pytest
import sqlalchemy as sa

from bench import log_quota_bench
from models import db as models_db
from models import log_sql
from services import tokens
from tests.support import workflows

QUOTA = 3 << 20  # both attackers' first bursts fit (2 x 1.06 MB), the next ones do not
BURSTS = 6
LINE = 4096  # characters (ASCII), 256 lines a burst
MARKER = re.compile(r"^(\d+) lines? dropped: the Space's log quota$")

VICTIM = """
class Victim:
    def __init__(self, env): pass
    def run(self, event, step):
        def effect():
            for i in range(5):
                print("victim line", i)
        step.do("talk", effect)
        return None
"""


@pytest.fixture()
def stack():
    with workflows.private_stack(
        workers=2, worker_pool="solo", extra_env={"TAKOHOST_QUOTA_LOG_BYTES": str(QUOTA)}
    ) as s:
        yield s


def expected_line(tag: str, burst: int, line: int) -> str:
    """What the attack prints for (``burst``, ``line``) (the same generator as ``FLOOD``)."""
    return f"{tag}:{burst:05d}:{line:03d}:" + random.Random(f"{tag}-{burst}-{line}").randbytes(2048).hex()[
        : LINE - 11 - len(tag)
    ]


def _rows(url: str, sql: str, **params) -> list:
    with models_db.session_scope(url) as session:
        return session.execute(sa.text(sql), params).all()


def test_a_log_flood_is_bounded_by_the_quota_and_loses_nothing_unsaid(stack):
    flood = workflows.deploy(stack.db_url, space=stack.space, source=log_quota_bench.FLOOD, class_name="Flood")
    http = stack.instances(flood.workflow)
    [[size_before]] = _rows(stack.db_url, "SELECT pg_total_relation_size('tenant_logs')")
    tags = ["f0", "f1"]
    for tag in tags:
        code, body = http.call("POST", "", {"id": tag, "params": {"tag": tag, "bursts": BURSTS}})
        assert code == 201, body
    for tag in tags:
        workflows.wait_until(
            lambda tag=tag: http.status(tag)["status"] == "complete", timeout=150, message=f"{tag} completes"
        )
    # another Space is not affected by this one's quota
    victim_space = f"v{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        victim_token = tokens.create_token_txn(session, space=victim_space)
    victim = workflows.deploy(stack.db_url, space=victim_space, source=VICTIM, class_name="Victim")
    victim_http = workflows.HttpInstances(stack.api_url, victim_token, victim_space, victim.workflow)
    assert victim_http.call("POST", "", {"id": "v"})[0] == 201
    workflows.wait_until(lambda: victim_http.status("v")["status"] == "complete", timeout=60, message="victim")

    [[counted, size_after]] = _rows(
        stack.db_url,
        "SELECT (SELECT log_bytes FROM space_usage WHERE space = :s), pg_total_relation_size('tenant_logs')",
        s=stack.space,
    )
    [[recounted]] = _rows(
        stack.db_url,
        f"""SELECT COALESCE(sum(octet_length(l.message) + {log_sql.LINE_OVERHEAD_BYTES}), 0)
            FROM tenant_logs l JOIN instances i ON i.pk = l.instance_pk WHERE i.space = :s""",
        s=stack.space,
    )
    assert counted == recounted
    markers_bytes = 2 * BURSTS * (64 + 50)
    assert counted <= QUOTA + markers_bytes, counted  # only the markers pass it, whoever writes at once
    assert size_after - size_before <= 3 * QUOTA, (size_before, size_after)  # unbounded: 1.5 MB a burst

    printed = 256 * BURSTS
    for tag in tags:
        lines = _rows(
            stack.db_url,
            """SELECT l.epoch, l.stream, l.message FROM tenant_logs l JOIN instances i ON i.pk = l.instance_pk
               WHERE i.space = :s AND i.instance_id = :id ORDER BY l.seq""",
            s=stack.space,
            id=tag.encode(),
        )
        stored = [message for _, stream, message in lines if stream == "stdout"]
        markers = [(epoch, message) for epoch, stream, message in lines if stream == "host"]
        assert all(MARKER.match(message) for _, message in markers), markers
        epochs = [epoch for epoch, _ in markers]
        assert len(epochs) == len(set(epochs)), "one marker per context, not one per dropped line"
        dropped = sum(int(MARKER.match(message).group(1)) for _, message in markers)
        assert len(stored) + dropped == printed, (len(stored), dropped)
        assert markers, "the quota was reached: the drop must be said"
        # every stored line is exactly what was printed, in order; the first burst fitted whole
        wanted = {expected_line(tag, b, j): (b, j) for b in range(BURSTS) for j in range(256)}
        positions = [wanted[message] for message in stored]
        assert positions == sorted(positions)
        assert positions[:256] == [(0, j) for j in range(256)]
    victim_lines = _rows(
        stack.db_url,
        "SELECT l.message FROM tenant_logs l JOIN instances i ON i.pk = l.instance_pk WHERE i.space = :s ORDER BY seq",
        s=victim_space,
    )
    assert [m for (m,) in victim_lines] == [f"victim line {i}" for i in range(5)]
