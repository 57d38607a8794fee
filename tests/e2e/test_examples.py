"""The examples, deployed with the CLI and driven to their terminal state on the real host
(API + worker + beat processes), as their READMEs tell a user to (docs/spec/host-features.md#hf-one-command)."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import shutil
import time

from tests.e2e.test_cli_client import Cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def copy_example(name: str, tmp_path: pathlib.Path, replacements: dict[str, str]) -> pathlib.Path:
    """A copy of ``examples/NAME`` with ``takohost.toml`` edited (each ``old`` must occur)."""
    target = tmp_path / name
    shutil.copytree(EXAMPLES / name, target)
    toml = (target / "takohost.toml").read_text(encoding="utf-8")
    for old, new in replacements.items():
        assert old in toml, old
        toml = toml.replace(old, new)
    (target / "takohost.toml").write_text(toml, encoding="utf-8")
    return target


def step_names(history: list[dict]) -> list[str]:
    """The step names mentioned by StepCompleted events, in order."""
    names = []
    for event in history:
        if event["eventType"] == "StepCompleted":
            attributes = event.get("attributes") or {}
            names.append(attributes.get("name") or attributes.get("stepName") or json.dumps(attributes))
    return names


def test_orders_runs_to_complete(cli: Cli) -> None:
    summary = cli.json("deploy", str(EXAMPLES / "orders"))
    assert [w["name"] for w in summary["workflows"]] == ["order-fulfilment"]
    params = {
        "orderId": "A-1001",
        "customer": "ada@example.com",
        "paymentMethod": "pm_card_ok",
        "items": [{"sku": "TEA-01", "qty": 2, "unitPrice": 1250}],
    }
    assert cli.json(
        "instances", "create", "order-fulfilment", "--id", "A-1001", "--params", json.dumps(params)
    ) == {"id": "A-1001"}
    cli.wait_status("order-fulfilment", "A-1001", "waiting")
    cli.ok(
        "instances",
        "send-event",
        "order-fulfilment",
        "A-1001",
        "shipped",
        "--payload",
        '{"carrier": "DHL", "trackingNumber": "00340434161094042557"}',
    )
    final = json.loads(
        cli.ok("status", "order-fulfilment", "A-1001", "--watch", "--timeout", "90", "--json").stdout
    )
    assert final["status"] == "complete"
    output = final["output"]
    assert output["status"] == "complete"
    assert (output["orderId"], output["amount"], output["currency"]) == ("A-1001", 2500, "EUR")
    assert output["trackingNumber"] == "00340434161094042557"
    assert output["chargeId"].startswith("ch_")

    history = cli.json("instances", "history", "order-fulfilment", "A-1001")["events"]
    types = [event["eventType"] for event in history]
    assert types[0] == "InstanceCreated" and types[-1] == "InstanceCompleted"
    names = " ".join(step_names(history))
    # The SWF e-commerce shape: verify, charge, (wait for shipment), record completion, in order.
    assert names.index("verify order") < names.index("charge card") < names.index("record completion")

    # A completed order takes no more events: the API's code and message, no traceback.
    line = cli.fails("instances", "send-event", "order-fulfilment", "A-1001", "shipped")
    assert line.startswith("error: instance_terminal: ")


def test_approvals_reminds_then_applies_after_the_hold(cli: Cli, tmp_path: pathlib.Path) -> None:
    project = copy_example(
        "approvals",
        tmp_path,
        {
            "REMIND_AFTER_SECONDS = 86400": "REMIND_AFTER_SECONDS = 2",
            "MAX_REMINDERS = 3": "MAX_REMINDERS = 50",
        },
    )
    cli.ok("deploy", str(project))
    params = {
        "requestId": "CR-7",
        "title": "Raise the API rate limit",
        "requester": "ada",
        "approvers": ["grace", "alan"],
        "holdSeconds": 1,
    }
    cli.ok("instances", "create", "approval-request", "--id", "CR-7", "--params", json.dumps(params))

    deadline = time.monotonic() + 60
    while "reminder #1" not in " ".join(
        step_names(cli.json("instances", "history", "approval-request", "CR-7")["events"])
    ):
        assert time.monotonic() < deadline, "no reminder was sent"
        time.sleep(1)

    cli.ok(
        "instances",
        "send-event",
        "approval-request",
        "CR-7",
        "decision",
        "--payload",
        '{"approved": true, "by": "grace", "comment": "ok"}',
    )
    final = json.loads(
        cli.ok("status", "approval-request", "CR-7", "--watch", "--timeout", "90", "--json").stdout
    )
    assert final["status"] == "complete"
    assert final["output"]["status"] == "applied"
    assert final["output"]["by"] == "grace"
    assert final["output"]["reminders"] >= 1

    history = cli.json("instances", "history", "approval-request", "CR-7")["events"]
    types = [event["eventType"] for event in history]
    assert "WaitTimedOut" in types and "SleepScheduled" in types and "SleepCompleted" in types
    assert "apply change" in " ".join(step_names(history))


def test_approvals_notifications_reach_a_public_webhook(cli: Cli, tmp_path: pathlib.Path) -> None:
    """Public egress (docs/egress.md): the example's ``NOTIFY_WEBHOOK_URL`` is reached from a
    step, through the host's egress proxy (a server on an address the test setting makes public)."""
    from tests.support import egress as net

    address = net.public_address()
    with net.http_server(address) as seen:
        project = copy_example(
            "approvals",
            tmp_path,
            {'NOTIFY_WEBHOOK_URL = ""': f'NOTIFY_WEBHOOK_URL = "http://{address}/hook"'},
        )
        cli.ok("deploy", str(project))
        params = {"requestId": "CR-8", "title": "Rotate the keys", "requester": "ada", "approvers": ["grace"]}
        cli.ok("instances", "create", "approval-request", "--id", "CR-8", "--params", json.dumps(params))
        deadline = time.monotonic() + 60
        while not seen:
            assert time.monotonic() < deadline, "the webhook was never called"
            time.sleep(0.5)
    assert seen[0].startswith(f"POST {address}/hook ") and "Rotate the keys" in seen[0], seen
    history = cli.json("instances", "history", "approval-request", "CR-8")["events"]
    results = [e["attributes"] for e in history if e["eventType"] == "StepCompleted"]
    assert any((r.get("result") or {}).get("delivered") is True for r in results), results
    logs = cli.json("instances", "logs", "approval-request", "CR-8")
    lines = logs["logs"] if isinstance(logs, dict) else logs
    assert any(
        line["stream"] == "host" and line["message"].startswith(f"egress {address}:80: sent ")
        for line in lines
    ), lines


def test_approvals_rejection(cli: Cli) -> None:
    cli.ok("deploy", str(EXAMPLES / "approvals"))
    cli.ok(
        "instances", "create", "approval-request", "--id", "CR-8", "--params", '{"title": "Drop the table"}'
    )
    cli.wait_status("approval-request", "CR-8", "waiting")
    cli.ok(
        "instances",
        "send-event",
        "approval-request",
        "CR-8",
        "decision",
        "--payload",
        '{"approved": false, "by": "alan"}',
    )
    final = json.loads(
        cli.ok("status", "approval-request", "CR-8", "--watch", "--timeout", "90", "--json").stdout
    )
    assert final["output"] == {"requestId": "CR-8", "status": "rejected", "by": "alan", "reminders": 0}


def test_nightly_report_cron_starts_a_workflow(cli: Cli, tmp_path: pathlib.Path) -> None:
    project = copy_example("nightly-report", tmp_path, {'cron = "0 2 * * *"': 'cron = "* * * * *"'})
    summary = cli.json("deploy", str(project))
    assert [(t["name"], t["cron"]) for t in summary["triggers"]] == [("nightly-report-schedule", "* * * * *")]

    deadline = time.monotonic() + 130  # up to a minute to the next match, then its delivery
    while not (listed := cli.json("instances", "list", "daily-report")["instances"]):
        assert time.monotonic() < deadline, "the trigger started no instance"
        time.sleep(2)
    instance_id = listed[0]["id"]
    match = re.fullmatch(r"report-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})Z", instance_id)
    assert match, instance_id
    scheduled = dt.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M").replace(tzinfo=dt.UTC)
    assert abs((dt.datetime.now(dt.UTC) - scheduled).total_seconds()) < 300

    final = json.loads(
        cli.ok("status", "daily-report", instance_id, "--watch", "--timeout", "90", "--json").stdout
    )
    assert final["status"] == "complete"
    period = final["output"]["period"]
    assert period["end"] == scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert final["output"]["published"] is False
    assert "orders:" in final["output"]["report"]

    # The match that started it is in the trigger's runs ledger, delivered ok.
    deadline = time.monotonic() + 30
    while True:
        runs = cli.json("runs", "nightly-report-schedule")["runs"]
        delivered = [run for run in runs if any(d["outcome"] == "ok" for d in run.get("deliveries", []))]
        if delivered:
            break
        assert time.monotonic() < deadline, f"no match was delivered ok: {runs}"
        time.sleep(1)
    assert delivered[-1]["cron"] == "* * * * *"
    # ... with the instance its handler started, in the ledger and in the CLI's table.
    started = [i for run in delivered for d in run["deliveries"] for i in d.get("instances", [])]
    assert instance_id in [i["id"] for i in started]
    table = cli.ok("runs", "nightly-report-schedule").stdout
    assert "match(es)" in table and instance_id in table

    # Back to the nightly schedule: the trigger is updated in place (PUT with the new cron).
    again = cli.json("deploy", str(EXAMPLES / "nightly-report"))
    assert again["triggers"][0]["uid"] == summary["triggers"][0]["uid"]
    assert again["triggers"][0]["cron"] == "0 2 * * *"


def test_rate_alert_calls_an_http_api_with_a_pinned_package(cli: Cli, tmp_path: pathlib.Path) -> None:
    """A Version that pins ``requests`` (installed by the host from a wheelhouse: the installed
    ``requests`` and its dependencies repacked by the test, no registry) runs a step that calls an
    HTTP API with it, through the egress proxy (a server on an address the test setting makes
    public); README "Writing a workflow", docs/packages.md."""
    import os

    from tests.support import egress as net
    from tests.support import wheels

    versions = wheels.requests_wheelhouse(os.environ["TAKOHOST_WHEELHOUSE"])
    address = net.public_address()
    body = json.dumps({"base": "EUR", "date": "2026-12-03", "rates": {"USD": 1.0842}}).encode()
    route = {"/latest?from=EUR&to=USD": (200, {"Content-Type": "application/json"}, body)}
    with net.http_server(address, routes=route) as seen:
        project = copy_example(
            "rate-alert",
            tmp_path,
            {
                'requirements = ["requests==2.34.2"]': f'requirements = ["requests=={versions["requests"]}"]',
                'RATES_API_URL = "https://api.frankfurter.app/latest"': f'RATES_API_URL = "http://{address}/latest"',
            },
        )
        summary = cli.json("deploy", str(project))
        version = json.loads(cli.ok("resources", "get", summary["version"]["uid"]).stdout)
        assert version["spec"]["requirements"] == [f"requests=={versions['requests']}"]
        params = {"base": "EUR", "quote": "USD", "above": 1.05}
        cli.ok("instances", "create", "rate-alert", "--id", "eur-usd", "--params", json.dumps(params))
        final = json.loads(
            cli.ok("status", "rate-alert", "eur-usd", "--watch", "--timeout", "90", "--json").stdout
        )
    assert final["status"] == "complete", final
    assert final["output"] == {
        "base": "EUR",
        "quote": "USD",
        "rate": 1.0842,
        "date": "2026-12-03",
        "above": 1.05,
        "alert": True,
    }
    assert seen == [f"{address}/latest?from=EUR&to=USD"]
    logs = cli.json("instances", "logs", "rate-alert", "eur-usd")
    lines = logs["logs"] if isinstance(logs, dict) else logs
    assert any(
        line["stream"] == "host" and line["message"].startswith(f"egress {address}:80: ") for line in lines
    )


def test_a_deploy_whose_pin_cannot_install_fails_naming_it_and_leaves_nothing(
    cli: Cli, tmp_path: pathlib.Path
) -> None:
    project = copy_example(
        "rate-alert",
        tmp_path,
        {'requirements = ["requests==2.34.2"]': 'requirements = ["tako-absent==9.9.9"]'},
    )
    result = cli.run("deploy", str(project))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "package_not_found" in result.stderr and "tako-absent" in result.stderr, result.stderr
    # The Worker, Workflow and failed Version this deploy created are deleted again.
    assert cli.json("resources", "list")["resources"] == []
