"""Tenant logs, tracebacks and the replay hint through real ``takohost api`` and ``worker``
processes and the ``takohost`` command (docs/spec/host-features.md#hf-observability)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.parse

import requests

from tests.support import workflows

SOURCE = textwrap.dedent(
    """
    import random
    class Noisy:
        def __init__(self, env): pass
        def run(self, event, step):
            print("starting", event["instanceId"])
            step.do(f"draw {random.random()}", lambda: {"n": 1})
            def charge():
                print("charging", event["params"]["amount"])
                return lookup(event)
            step.do("charge", charge, {"maxAttempts": 2})
            return {"never": True}

    def lookup(event):
        return {"card": event["params"]["card"]}
    """
)


def _cli(base: str, space: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAKOHOST_URL": base, "TAKOHOST_SPACE": space, "TAKOHOST_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "host_cli", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_logs_and_tracebacks_through_real_processes(api_server, worker, space_token):
    space, token = space_token
    base = api_server.extra["url"]
    deployed = workflows.deploy_http(base, token, space, source=SOURCE, class_name="Noisy")
    headers = {"Authorization": f"Bearer {token}"}
    prefix = f"{base}/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    instance_id = "noisy/1 ✓"
    encoded = urllib.parse.quote(instance_id, safe="")
    created = requests.post(prefix, json={"id": instance_id, "params": {"amount": 12}}, headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    status = workflows.wait_until(
        lambda: (s := requests.get(f"{prefix}/{encoded}", headers=headers, timeout=10).json())["status"] == "errored"
        and s,
        timeout=90,
        message="errored",
    )
    # the spec's shape (docs/spec/durable-workflow.md#dw-status), exactly: the traceback is not in status()
    assert status == {
        "id": instance_id,
        "status": "errored",
        "error": {"reason": "step_failed", "message": "step failed after 2 attempts: KeyError: 'card'"},
    }
    body = requests.get(f"{prefix}/{encoded}/logs", headers=headers, timeout=10).json()
    lines = body["logs"]
    assert set(lines[0]) == {"time", "epoch", "step", "attempt", "stream", "message", "replayed"}
    tenant = [(line["step"], line["attempt"], line["message"]) for line in lines if line["stream"] == "stdout"]
    assert (None, None, f"starting {instance_id}") in tenant
    assert ("charge", 1, "charging 12") in tenant and ("charge", 2, "charging 12") in tenant
    # context 2 (the retry) printed "starting" again before its first step: a replay; an attempt's
    # output never is
    starting = [line["replayed"] for line in lines if line["message"] == f"starting {instance_id}"]
    assert starting == [False, True], lines
    assert not any(line["replayed"] for line in lines if line["message"] == "charging 12")
    host = [line["message"] for line in lines if line["stream"] == "host"]
    assert any("attempt 2 of step 'charge' failed: KeyError: 'card'" in m and "in lookup" in m for m in host)
    assert any("replay diverged (skipped)" in m for m in host)  # the random step name of context 2
    history = requests.get(f"{prefix}/{encoded}/history", headers=headers, timeout=10).json()["events"]
    assert "ReplayDiverged" in [e["eventType"] for e in history]
    # the CLI: logs, status with the traceback, history with it
    logs = _cli(base, space, token, "instances", "logs", deployed.workflow, instance_id)
    assert logs.returncode == 0, logs.stderr
    assert "charge#2" in logs.stdout and "charging 12" in logs.stdout and "KeyError" in logs.stdout
    assert logs.stdout.count(f"starting {instance_id}") == 1  # the replayed line is hidden …
    assert "1 line(s) printed again while replaying recorded steps are hidden (--replayed shows them)" in logs.stderr
    every = _cli(base, space, token, "instances", "logs", deployed.workflow, instance_id, "--replayed")
    assert every.returncode == 0 and every.stdout.count(f"starting {instance_id}") == 2  # … unless asked
    assert "hidden" not in every.stderr
    shown = _cli(base, space, token, "instances", "status", deployed.workflow, instance_id)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback (the Version's frames, innermost last):" in shown.stdout
    assert 'File "main.py", line 15, in lookup' in shown.stdout
    assert 'return {"card": event["params"]["card"]}' in shown.stdout
    followed = _cli(base, space, token, "instances", "logs", deployed.workflow, instance_id, "--follow", "--interval", "0.2")
    assert followed.returncode == 0 and followed.stdout.count("charging 12") == 2


def test_follow_prints_lines_while_the_instance_runs(api_server, worker, space_token):
    space, token = space_token
    base = api_server.extra["url"]
    source = textwrap.dedent(
        """
        import time
        class Slow:
            def __init__(self, env): pass
            def run(self, event, step):
                for i in range(3):
                    step.do(f"tick {i}", lambda: print("tick", i) or time.sleep(1) or {"i": i})
                return None
        """
    )
    deployed = workflows.deploy_http(base, token, space, source=source, class_name="Slow")
    headers = {"Authorization": f"Bearer {token}"}
    prefix = f"{base}/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    env = {**os.environ, "TAKOHOST_URL": base, "TAKOHOST_SPACE": space, "TAKOHOST_TOKEN": token}
    assert requests.post(prefix, json={"id": "slow"}, headers=headers, timeout=10).status_code == 201
    follower = subprocess.Popen(
        [sys.executable, "-m", "host_cli", "instances", "logs", deployed.workflow, "slow", "-f", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        started = time.monotonic()
        first = follower.stdout.readline()
        assert "tick 0" in first, first
        assert time.monotonic() - started < 30
        # It ends by itself once the instance is complete. The rest is read from the same
        # buffered file: ``communicate`` reads the raw descriptor and would skip lines that
        # ``readline`` already buffered (tick 0 and tick 1 often come in one page).
        follower.wait(timeout=60)
        out = follower.stdout.read()
    finally:
        follower.kill()
    assert "tick 1" in out and "tick 2" in out


def test_the_readme_logs_block_runs_as_written(api_server, worker, beat_process, space_token):
    """README "What your code printed, and why it failed": its commands, as written, after the
    tour's deploy and first instance; each comment's claim checked."""
    import re
    import shlex

    from tests.e2e.test_readme_tour import README, TourCli

    space, token = space_token
    cli = TourCli(url=api_server.extra["url"], space=space, token=token)
    section = README.split("### What your code printed, and why it failed", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True)[1:] for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["instances", "logs"], ["instances", "create"], ["instances", "logs"]]
    cli.ok("deploy", "examples/orders")
    cli.ok(
        "instances", "create", "order-fulfilment", "--id", "A-1001", "--params",
        '{"orderId": "A-1001", "customer": "ada@example.com", "paymentMethod": "pm_card_ok",'
        ' "items": [{"sku": "TEA-01", "qty": 2, "unitPrice": 1250}]}',
    )
    cli.wait_status("order-fulfilment", "A-1001", "waiting")
    # "what A-1001 printed, by step and attempt"
    assert "charge card#1  stdout  charging 2500 EUR to pm_card_ok" in cli.ok(*commands[0]).stdout
    cli.ok(*commands[1])
    # "prints lines as they come, until A-1002 ends (~30 s of retries)"
    followed = cli.ok(*commands[2], timeout=170).stdout
    assert followed.count("charging 1250 EUR to pm_card_declined") == 5
    assert "attempt 5 of step 'charge card' failed: PaymentError: card declined" in followed
    assert 'File "payments.py", line' in followed and 'raise PaymentError("card declined")' in followed
    # "instances history shows the same traceback under each StepAttemptFailed"
    history = cli.ok("instances", "history", "order-fulfilment", "A-1002").stdout
    assert history.count("Traceback (the Version's frames, innermost last):") == 5


def test_run_logs_prints_what_a_cron_run_printed_and_its_traceback(api_server, db_url, space_token):
    """README "Commands": ``takohost run-logs TRIGGER TIME`` prints one run's lines (every
    delivery of that match) with its traceback, by the time ``takohost runs`` shows or by epoch
    milliseconds; ``--json`` gives the lines as one document; an unknown time is an error."""
    import datetime as dt
    import json

    from tests.integration.test_cron_support import at, create_stack, decide
    from tests.integration.test_tenant_logs import CHATTY_HANDLER
    from workers import cron_tasks

    space, token = space_token
    base = api_server.extra["url"]
    minute = "2030-03-04T10:05:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=CHATTY_HANDLER, now=at(minute) - dt.timedelta(seconds=30)
    )
    [(match_pk, *_)] = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(match_pk) == "failed"
    runs = _cli(base, space, token, "runs", stack.trigger_uid)
    assert runs.returncode == 0 and minute in runs.stdout, (runs.stdout, runs.stderr)
    printed = _cli(base, space, token, "run-logs", stack.trigger_uid, minute)
    assert printed.returncode == 0, printed.stderr
    rows = printed.stdout.splitlines()
    assert "delivery 1" in rows[0] and "stdout" in rows[0] and "handler starts 1898849100000" in rows[0], rows
    assert "stderr" in rows[1] and "WARNING:root:about to fail" in rows[1], rows
    assert "RuntimeError: boom at 1898849100000" in printed.stdout
    assert 'File "main.py", line 6, in scheduled' in printed.stdout
    by_ms = _cli(base, space, token, "run-logs", stack.trigger_uid, "1898849100000")
    assert by_ms.returncode == 0 and by_ms.stdout == printed.stdout, by_ms.stderr
    as_json = _cli(base, space, token, "run-logs", stack.trigger_uid, minute, "--json")
    assert as_json.returncode == 0, as_json.stderr
    lines = json.loads(as_json.stdout)["logs"]
    assert [(line["delivery"], line["stream"]) for line in lines[:2]] == [(1, "stdout"), (1, "stderr")]
    followed = _cli(base, space, token, "run-logs", stack.trigger_uid, minute, "--follow", "--interval", "0.2")
    assert followed.returncode == 0 and followed.stdout == printed.stdout, followed.stderr
    unknown = _cli(base, space, token, "run-logs", stack.trigger_uid, "2030-03-04T10:06:00Z")
    assert unknown.returncode != 0 and "not_found" in unknown.stderr + unknown.stdout, (unknown.stdout, unknown.stderr)
