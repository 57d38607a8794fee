"""How long does a Space wait beside a hostile neighbour? (docs/spec/host-features.md#hf-neighbours)

Prints one JSON object with two measurements, each on a scratch stack of its own
(``bench.engine_bench.Scratch``: its own database and Redis namespace, ``takohost api`` and
``takohost worker`` processes on default settings):

* ``slots``: Space A runs ``--hangers`` instances whose effect never returns (``time.sleep`` in a
  loop) and then creates ``--flood`` more of them over HTTP (8 threads); right after, Space B
  creates a one-step instance: seconds from its create to ``complete`` (``victim_s``; ``null``
  when not complete after ``--give-up`` s), beside B's unloaded figure (median of 3). Run on
  ``takohost dev``'s worker (one ``takohost worker --concurrency 2``: 2 slots) and on a fleet of 2
  workers × 2 slots.
* ``validation``: Space A uploads ``--slow-versions`` WorkerVersions whose import sleeps 9.5 s,
  then Space B a trivial one: seconds from B's create to its Version validated (``victim_s``).

    python -m bench.fairness_bench                  # both, default sizes
    python -m bench.fairness_bench --only slots --flood 200

``tests/security/test_fairness.py`` runs the same functions (:func:`measure_slots`,
:func:`measure_validation`) on its own processes and holds the 2 s bounds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import statistics
import time
import urllib.parse
import uuid

#: An effect that never returns (sleeps, so it takes a slot without taking a core).
HANG = """
import time
class Hang:
    def __init__(self, env):
        pass
    def run(self, event, step):
        def forever():
            while True:
                time.sleep(1)
        return step.do("forever", forever)

class One:
    def __init__(self, env):
        pass
    def run(self, event, step):
        return step.do("one", lambda: {"ok": True})
"""

#: A WorkerVersion whose import takes 9.5 s (under the 10 s validation limit).
SLOW_IMPORT = """
import time
time.sleep(9.5)
class Slow:
    def run(self, event, step):
        return None
"""

TRIVIAL = """
class Quick:
    def run(self, event, step):
        return None
"""


class Http:
    """JSON over one HTTP connection per call, with a Space's token."""

    def __init__(self, base: str, token: str, space: str) -> None:
        parsed = urllib.parse.urlsplit(base)
        self.host, self.port, self.token, self.space = parsed.hostname, parsed.port, token, space

    def call(self, method: str, path: str, body: object = None, *, headers: dict | None = None) -> tuple[int, dict]:
        """``(status, JSON body)`` of ``method /v2/spaces/{space}{path}``."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                all_headers["Content-Type"] = "application/json"
            conn.request(method, f"/v2/spaces/{self.space}{path}", body=data, headers=all_headers)
            response = conn.getresponse()
            raw = response.read()
            return response.status, (json.loads(raw) if raw else {})
        finally:
            conn.close()

    def create(self, workflow: str, instance_id: str) -> None:
        """Create an instance (asserting 201)."""
        code, body = self.call("POST", f"/resources/{workflow}/instances", {"id": instance_id},
                               headers={"Idempotency-Key": uuid.uuid4().hex})
        if code != 201:
            raise RuntimeError(f"create {instance_id}: {code} {body}")

    def status(self, workflow: str, instance_id: str) -> str:
        """The instance's status word."""
        code, body = self.call("GET", f"/resources/{workflow}/instances/{instance_id}")
        if code != 200:
            raise RuntimeError(f"status {instance_id}: {code} {body}")
        return body["status"]


def new_space(db_url: str) -> tuple[str, str]:
    """A new Space and a token of it: ``(space, token)``."""
    from models import db as models_db
    from services import tokens

    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    return space, token


def time_to_complete(http: Http, workflow: str, instance_id: str, *, give_up: float) -> float | None:
    """Seconds from the create call to ``complete`` (``None``: not complete after ``give_up`` s)."""
    started = time.monotonic()
    http.create(workflow, instance_id)
    while time.monotonic() - started < give_up:
        if http.status(workflow, instance_id) == "complete":
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def _running(db_url: str, workflow: str) -> int:
    import sqlalchemy as sa

    from models import db as models_db
    from models import instances as inst_models

    table = inst_models.Instance.__table__
    with models_db.session_scope(db_url) as session:
        return int(session.scalar(
            sa.select(sa.func.count()).where(table.c.workflow_uid == workflow, table.c.status == "running")
        ))


def _settled(count, *, still_s: float = 2.0, give_up_s: float = 30.0) -> int:
    """``count()`` once it has not changed for ``still_s`` seconds (or after ``give_up_s``): on a
    loaded machine a context may take more than a second to start."""
    value, since, started = count(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < still_s and time.monotonic() - started < give_up_s:
        time.sleep(0.1)
        now = count()
        if now != value:
            value, since = now, time.monotonic()
    return value


def queue_depth(namespace: str) -> int:
    """Messages waiting in the stack's tenant-work queue."""
    import redis

    from core import config

    client = redis.Redis.from_url(config.load_settings().redis_url)
    try:
        return int(client.llen(f"{namespace}:{namespace}.tasks"))
    finally:
        client.close()


def measure_slots(*, api_url: str, db_url: str, namespace: str, hangers: int = 3, flood: int = 1000,
                  give_up: float = 30.0) -> dict:
    """The ``slots`` measurement (module docstring) on a running stack; returns its figures."""
    from bench import engine_bench

    space_a, token_a = new_space(db_url)
    space_b, token_b = new_space(db_url)
    hang = engine_bench.deploy(db_url, space_a, source=HANG, classes=("Hang",))["Hang"]
    one = engine_bench.deploy(db_url, space_b, source=HANG, classes=("One",))["One"]
    http_a, http_b = Http(api_url, token_a, space_a), Http(api_url, token_b, space_b)
    if time_to_complete(http_b, one, "warm", give_up=give_up) is None:
        raise RuntimeError("the victim's warm-up instance did not complete")
    unloaded = statistics.median(time_to_complete(http_b, one, f"unloaded-{i}", give_up=give_up) or give_up
                                 for i in range(3))
    for i in range(hangers):
        http_a.create(hang, f"hang-{i}")
    deadline = time.monotonic() + 30
    while _running(db_url, hang) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    hanging = _settled(lambda: _running(db_url, hang))  # the other hangers start too, or are deferred
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: http_a.create(hang, f"flood-{i}"), range(flood)))
    flood_s = time.monotonic() - started
    depth = queue_depth(namespace)
    victim = time_to_complete(http_b, one, "victim", give_up=give_up)
    return {
        "hangers": hangers,
        "hanging_at_once": hanging,
        "flood": flood,
        "flood_create_s": round(flood_s, 3),
        "queue_depth_after_flood": depth,
        "unloaded_s": round(unloaded, 3),
        "victim_s": None if victim is None else round(victim, 3),
        "still_hanging": _running(db_url, hang),
    }


#: The forms of the resources the validation measurement creates.
FORMS = {
    "ModuleWorker": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
    "WorkerVersion": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
}


def _post_resource(http: Http, form: str, spec: dict) -> dict:
    """Create a resource; returns its accepted Operation (``{"id", "state", "resourceUid", …}``)."""
    body = {"form": FORMS[form], "name": f"r{uuid.uuid4().hex[:12]}", "spec": spec}
    code, answer = http.call("POST", "/resources", body, headers={"Idempotency-Key": uuid.uuid4().hex})
    if code != 202:
        raise RuntimeError(f"create {form}: {code} {answer}")
    return answer


def _operation(http: Http, operation: str) -> dict:
    code, body = http.call("GET", f"/operations/{operation}")
    if code != 200:
        raise RuntimeError(f"operation {operation}: {code} {body}")
    return body


def wait_operation(http: Http, operation: str, *, give_up: float) -> dict:
    """The Operation once finished (``RuntimeError`` after ``give_up`` s)."""
    deadline = time.monotonic() + give_up
    while time.monotonic() < deadline:
        body = _operation(http, operation)
        if body["state"] not in ("pending", "running"):
            return body
        time.sleep(0.02)
    raise RuntimeError(f"Operation {operation} not finished after {give_up} s")


def _version_spec(worker: str, source: str) -> dict:
    return {"worker": {"resourceUid": worker}, "mainModule": "main.py", "modules": {"main.py": source},
            "vars": {}, "workflowBindings": []}


def measure_validation(*, api_url: str, db_url: str, slow_versions: int = 3, give_up: float = 60.0) -> dict:
    """The ``validation`` measurement (module docstring) on a running stack; returns its figures."""
    space_a, token_a = new_space(db_url)
    space_b, token_b = new_space(db_url)
    http_a, http_b = Http(api_url, token_a, space_a), Http(api_url, token_b, space_b)
    worker_a = wait_operation(http_a, _post_resource(http_a, "ModuleWorker", {})["id"], give_up=give_up)
    worker_b = wait_operation(http_b, _post_resource(http_b, "ModuleWorker", {})["id"], give_up=give_up)
    warm = _post_resource(http_b, "WorkerVersion", _version_spec(worker_b["resourceUid"], TRIVIAL))
    warm_started = time.monotonic()
    wait_operation(http_b, warm["id"], give_up=give_up)
    unloaded = time.monotonic() - warm_started
    slow = [_post_resource(http_a, "WorkerVersion", _version_spec(worker_a["resourceUid"], SLOW_IMPORT))["id"]
            for _ in range(slow_versions)]
    time.sleep(1.0)  # the first slow import checks are under way; the others are queued
    started = time.monotonic()
    quick = _post_resource(http_b, "WorkerVersion", _version_spec(worker_b["resourceUid"], TRIVIAL))
    done = wait_operation(http_b, quick["id"], give_up=give_up)
    victim = time.monotonic() - started
    if done["state"] != "succeeded":
        raise RuntimeError(f"the trivial Version failed: {done}")
    slow_left = sum(_operation(http_a, op)["state"] in ("pending", "running") for op in slow)
    slow_states = [wait_operation(http_a, op, give_up=give_up)["state"] for op in slow]
    return {
        "slow_versions": slow_versions,
        "unloaded_s": round(unloaded, 3),
        "victim_s": round(victim, 3),
        "slow_unfinished_when_victim_done": slow_left,
        "slow_states": slow_states,
    }


def run(args: argparse.Namespace) -> dict:
    """Every measurement of ``args.only`` on scratch stacks; returns the JSON figures."""
    from bench import engine_bench

    figures: dict = {}
    fleets = {"dev_1x2": (1, 2), "fleet_2x2": (2, 2)}
    for name, (workers, concurrency) in fleets.items():
        if "slots" not in args.only:
            break
        stack = engine_bench.Scratch(workers=workers, concurrency=concurrency)
        try:
            figures[f"slots_{name}"] = measure_slots(api_url=stack.api_url, db_url=stack.url,
                                                     namespace=stack.namespace, hangers=args.hangers,
                                                     flood=args.flood, give_up=args.give_up)
        finally:
            stack.close()
    if "validation" in args.only:
        stack = engine_bench.Scratch(workers=1, concurrency=2)
        try:
            figures["validation_dev_1x2"] = measure_validation(api_url=stack.api_url, db_url=stack.url,
                                                               slow_versions=args.slow_versions)
        finally:
            stack.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.fairness_bench [--only slots,validation] …``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="slots,validation", help="comma-separated: slots, validation")
    parser.add_argument("--hangers", type=int, default=3)
    parser.add_argument("--flood", type=int, default=1000)
    parser.add_argument("--slow-versions", type=int, default=3)
    parser.add_argument("--give-up", type=float, default=30.0)
    args = parser.parse_args(argv)
    args.only = args.only.split(",")
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
