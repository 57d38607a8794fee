"""The control plane never waits behind tenant code (docs/spec/host-features.md#hf-newcomer): with every worker slot of
the real ``takohost worker --concurrency 2`` busy in tenant code (and more tenant work queued
behind it), a PUT that changes a cron trigger is applied within seconds, because Operations go
to a queue of their own that the worker's control process consumes.

Before: the PUT's reconcile message queued behind the tenant work and took as long as the
slowest effect (40 s in the field; 90 s here) to apply.
"""

from __future__ import annotations

import pathlib
import textwrap
import time
import uuid

import requests

from tests.e2e.test_cli_client import Cli, write_project

HOG = textwrap.dedent(
    """
    import os
    import time


    class Hog:
        def __init__(self, env):
            self.dir = env.DIR

        def run(self, event, step):
            def spin():
                open(os.path.join(self.dir, event["instanceId"]), "w").close()
                time.sleep(90)
                return {}
            step.do("spin", spin)
            return {}


    def scheduled(event, env, ctx):
        pass
    """
)


def test_a_put_is_applied_while_every_slot_runs_tenant_code(
    api_server, worker, beat_process, space_token, db_url, tmp_path: pathlib.Path
) -> None:
    from models import db as models_db
    from services import tokens

    space, token = space_token
    cli = Cli(url=api_server.extra["url"], space=space, token=token)
    # One Space never holds every slot (fair share: the live slots minus one), so the hogs of two
    # Spaces fill both.
    space_b = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token_b = tokens.create_token_txn(session, space=space_b)
    cli_b = Cli(url=api_server.extra["url"], space=space_b, token=token_b)
    toml = f"""
        [worker]
        name = "hogs"
        [vars]
        DIR = "{tmp_path}"
        [[workflows]]
        name = "hog"
        class = "Hog"
        [[triggers]]
        name = "yearly"
        cron = "0 0 1 1 *"
    """
    project = str(write_project(tmp_path / "hogs", toml=toml, modules={"main.py": HOG}))
    cli.ok("deploy", project)
    cli_b.ok("deploy", project)
    hogs = [(c, f"hog-{name}-{index}") for c, name in ((cli, "a"), (cli_b, "b")) for index in range(2)]
    for owner, hog in hogs:  # two hold both slots; two more wait behind them
        owner.ok("instances", "create", "hog", "--id", hog)
    deadline = time.monotonic() + 60
    while len([p for p in tmp_path.iterdir() if p.name.startswith("hog-")]) < 2:
        assert time.monotonic() < deadline, "the two hogs never started"
        time.sleep(0.2)

    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    base = f"{api_server.extra['url']}/v2/spaces/{space}"
    trigger = next(r for r in cli.json("triggers", "list")["triggers"] if r["name"] == "yearly")
    spec = {**trigger["spec"], "cron": "*/7 * * * *"}
    try:
        started = time.monotonic()
        put = session.put(f"{base}/resources/{trigger['uid']}", json={"spec": spec},
                          headers={"Idempotency-Key": uuid.uuid4().hex})
        assert put.status_code == 202, put.text
        operation = put.json()
        while operation["state"] not in ("succeeded", "failed"):
            assert time.monotonic() - started < 30, f"the PUT waited behind tenant code: {operation}"
            time.sleep(0.05)
            operation = session.get(f"{base}/operations/{operation['id']}").json()
        applied = time.monotonic() - started
        assert operation["state"] == "succeeded", operation
        observed = session.get(f"{base}/resources/{trigger['uid']}").json()["observed"]
        assert observed["cron"] == "*/7 * * * *"
        busy = [p.name for p in tmp_path.iterdir() if p.name.startswith("hog-")]
        assert len(busy) == 2, busy  # both slots were still held by tenant code meanwhile
        print(f"\nPUT-to-applied with both slots busy and 2 contexts queued: {applied * 1000:.0f} ms")
        assert applied < 10
    finally:
        for owner, hog in hogs:
            owner.run("instances", "terminate", "hog", hog)


SLOW_IMPORT = """
import time
time.sleep(6)
class P:
    def run(self, event, step):
        return None
"""


def test_one_space_s_slow_version_imports_do_not_hold_another_space_s_operations(
    api_server, worker, space_token, db_url
) -> None:
    """A hostile tenant's attack: three WorkerVersions whose import sleeps 9.5 s (under the 10 s
    validation limit) held another Space's ModuleWorker create for 28 s, because the import
    checks ran in the control process. Now they have a process of their own: Space B's create is
    applied at once while Space A's slow imports are checked, and those still succeed."""
    from models import db as models_db
    from services import tokens
    from tests.support import workflows

    base = api_server.extra["url"]
    space_a, token_a = space_token
    space_b = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token_b = tokens.create_token_txn(session, space=space_b)
    a, b = requests.Session(), requests.Session()
    a.headers["Authorization"], b.headers["Authorization"] = f"Bearer {token_a}", f"Bearer {token_b}"
    worker_a = workflows._create_http(a, base, space_a, "ModuleWorker", {})

    def post(session: requests.Session, space: str, form: str, spec: dict) -> dict:
        body = {"form": workflows.FORM.format(f"{form}/{workflows.FORM_VERSIONS[form]}"),
                "name": f"r{uuid.uuid4().hex[:12]}", "spec": spec}
        answer = session.post(f"{base}/v2/spaces/{space}/resources", json=body,
                              headers={"Idempotency-Key": uuid.uuid4().hex}, timeout=10)
        assert answer.status_code == 202, answer.text
        return answer.json()

    slow = [post(a, space_a, "WorkerVersion", workflows.version_spec(worker=worker_a, source=SLOW_IMPORT))
            for _ in range(2)]
    time.sleep(1.0)  # the first import check is under way
    started = time.monotonic()
    created = post(b, space_b, "ModuleWorker", {})
    workflows._wait_operation(b, base, space_b, created, timeout=60)
    waited = time.monotonic() - started
    print(f"Space B's create applied in {waited:.2f} s beside Space A's slow imports")
    assert waited < 4.0, f"Space B's Operation waited {waited:.1f} s behind Space A's import checks"
    for op in slow:
        workflows._wait_operation(a, base, space_a, op, timeout=60)
