"""The control plane never waits behind tenant code (issue 15 item 6): with every worker slot of
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
    api_server, worker, beat_process, space_token, tmp_path: pathlib.Path
) -> None:
    space, token = space_token
    cli = Cli(url=api_server.extra["url"], space=space, token=token)
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
    cli.ok("deploy", str(write_project(tmp_path / "hogs", toml=toml, modules={"main.py": HOG})))
    for index in range(4):  # two hold both slots; two more wait behind them in the tenant queue
        cli.ok("instances", "create", "hog", "--id", f"hog-{index}")
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
        for index in range(4):
            cli.run("instances", "terminate", "hog", f"hog-{index}")
