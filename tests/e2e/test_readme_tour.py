"""The README's five-minute tour, command by command as the README writes it, against the real
host (API + worker + beat processes), with each comment's claim checked; the README's workflow
example; and the CLI commands a new user reaches for (docs/spec/host-features.md#hf-newcomer).

If the README drifts from what the host does, this test fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from tests.e2e.test_cli_client import Cli, write_project

REPO = pathlib.Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def tour_commands(index: int = 0) -> list[tuple[list[str], str]]:
    """``[(takohost argv, comment)]`` of the tour's ``index``-th ``sh`` block (``\\`` continuations
    joined): 0 is the tour itself, 1 the block of "What your code printed, and why it failed"."""
    section = README.split("## A five-minute tour", 1)[1].split("### The `takohost` command", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    block = blocks[index].replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        code, comment = (re.split(r"\s#\s", line, maxsplit=1) + [""])[:2]  # "cmd  # claim"
        words = shlex.split(code)
        if not words or words[0] == "export":
            continue
        assert words[0] == ".venv/bin/takohost", line
        commands.append((words[1:], comment.strip()))
    return commands


class TourCli(Cli):
    """:class:`Cli` run from the repository root (the tour's working directory), in a wide terminal."""

    def run(
        self, *args: str, timeout: float = 180, env: dict | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TAKOHOST_URL": self.url,
            "TAKOHOST_SPACE": self.space,
            "TAKOHOST_TOKEN": self.token,
            "COLUMNS": "250",
            **(env or {}),
        }
        return subprocess.run(
            [sys.executable, "-m", "host_cli", *args],
            capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=REPO,
        )


@pytest.fixture()
def cli(api_server, worker, beat_process, space_token) -> TourCli:
    space, token = space_token
    return TourCli(url=api_server.extra["url"], space=space, token=token)


def test_the_tour_runs_as_written_and_every_comment_holds(cli: TourCli) -> None:
    commands = tour_commands()
    assert [argv[:2] for argv, _ in commands] == [
        ["deploy", "examples/orders"],
        ["instances", "create"],
        ["instances", "status"],
        ["instances", "send-event"],
        ["status", "order-fulfilment"],
        ["instances", "history"],
    ]
    (deploy, _), (create, _), (status, status_claim), (send, _), (watch, watch_claim), (history, _) = commands

    cli.ok(*deploy)
    # "creates the ModuleWorker, the DurableWorkflow, a WorkerVersion … and a WorkerDeployment"
    forms = sorted(r["form"].split("/")[-3] for r in cli.json("resources", "list")["resources"])
    assert forms == ["DurableWorkflow", "ModuleWorker", "WorkerDeployment", "WorkerVersion"]
    assert "created instance A-1001" in cli.ok(*create).stdout
    cli.wait_status("order-fulfilment", "A-1001", "waiting")
    # "# waiting for event 'shipped' (step 'wait for shipment', until …); last completed step: 'charge card'"
    shown = " ".join(cli.ok(*status).stdout.split())
    assert "status waiting" in shown
    assert re.search(".*".join(re.escape(part) for part in status_claim.split("…")), shown), (status_claim, shown)
    assert "accepted" in cli.ok(*send).stdout
    # "# follows it to complete (exit 1 if errored/terminated)"
    assert watch_claim.startswith("follows it to complete")
    followed = cli.run(*watch, "--timeout", "120")
    assert followed.returncode == 0, followed.stderr
    assert "complete" in followed.stdout and "complete" in followed.stderr  # the change, then the table
    # "# the audit trail, step by step"
    trail = cli.ok(*history).stdout
    for step in ("verify order", "charge card", "wait for shipment", "record completion"):
        assert step in trail, step
    # "Every `instances` command takes `--json`"
    assert cli.json(*status)["status"] == "complete"
    assert cli.json(*history)["events"][-1]["eventType"] == "InstanceCompleted"

    # "What your code printed, and why it failed": its commands as written, and the text it shows
    (logs, _), (declined, _), (follow, follow_claim) = tour_commands(1)
    assert logs[:2] == ["instances", "logs"] and follow[-1] == "--follow", (logs, follow)
    printed = cli.ok(*logs).stdout
    assert re.search(r"charge card#1\s+stdout\s+charging 2500 EUR to pm_card_ok", printed), printed
    cli.ok(*declined)
    assert "until A-1002 ends" in follow_claim
    followed = cli.run(*follow, timeout=180)  # returns by itself once A-1002 ends
    assert "Traceback" not in followed.stderr
    shown = README.split("### What your code printed", 1)[1]
    example = re.search(r"```text\n(.*?)```", shown, flags=re.S).group(1)
    for line in example.splitlines():
        if line.strip() == "…":
            continue
        text = re.sub(r"^\S+Z\s+", "", line).strip()  # its time stamp differs
        assert " ".join(text.split()) in " ".join(followed.stdout.split()), (text, followed.stdout)


def _readme_workflow() -> str:
    section = README.split("### Writing a workflow", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_readme_workflow_runs_with_and_without_params(cli: TourCli, tmp_path: pathlib.Path) -> None:
    project = write_project(
        tmp_path / "readme",
        toml='[worker]\nname = "readme"\n[[workflows]]\nname = "reports"\nclass = "ReportWorkflow"\n',
        modules={"main.py": _readme_workflow()},
    )
    cli.ok("deploy", str(project))
    cli.ok("instances", "create", "reports", "--id", "with", "--params", '{"id": 7}')
    cli.ok("instances", "create", "reports", "--id", "without")  # "no params key": no KeyError
    for instance_id in ("with", "without"):
        cli.wait_status("reports", instance_id, "sleeping")
        assert "sleeping in step 'cool off'" in " ".join(cli.ok("status", "reports", instance_id).stdout.split())


BAD_RESULT = textwrap.dedent(
    """
    class Bad:
        def __init__(self, env):
            pass

        def run(self, event, step):
            try:
                step.do("a list", lambda: [1, 2])
            except Exception as exc:
                first = {"caught": type(exc).__name__}
            return [first]
    """
)


def test_status_watch_exits_1_when_errored_and_the_documented_errors(cli: TourCli, tmp_path) -> None:
    project = write_project(
        tmp_path / "bad", toml='[worker]\nname = "bad"\n[[workflows]]\nname = "bad-flow"\nclass = "Bad"\n',
        modules={"main.py": BAD_RESULT},
    )
    cli.ok("deploy", str(project))
    cli.ok("instances", "create", "bad-flow", "--id", "b-1")
    watched = cli.run("status", "bad-flow", "b-1", "--watch", "--timeout", "90")
    assert watched.returncode == 1, (watched.stdout, watched.stderr)
    assert "error: errored: instance 'b-1' ended errored" in watched.stderr
    final = cli.json("status", "bad-flow", "b-1")
    # README: a run returning a non-document ends errored/run_threw with this message
    assert final["error"]["reason"] == "run_threw"
    assert "run returned a value that is not a document" in final["error"]["message"]
    failed = [e for e in cli.json("instances", "history", "bad-flow", "b-1")["events"]
              if e["eventType"] == "StepAttemptFailed"]
    assert failed[0]["attributes"]["error"]["type"] == "InvalidDocument"
    assert "the effect result is not a document" in failed[0]["attributes"]["error"]["message"]


def test_the_commands_a_user_reaches_for(cli: TourCli, tmp_path: pathlib.Path) -> None:
    version = cli.ok("--version").stdout.strip()
    assert re.fullmatch(r"takohost \d+\.\d+\.\d+\S*", version), version
    source = textwrap.dedent(
        """
        class Flow:
            def __init__(self, env):
                pass

            def run(self, event, step):
                return {"ok": True}


        def scheduled(event, env, ctx):
            pass
        """
    )
    project = write_project(
        tmp_path / "tools",
        toml=textwrap.dedent(
            """
            [worker]
            name = "tools"
            [[workflows]]
            name = "flow-a"
            class = "Flow"
            [[workflows]]
            name = "flow-b"
            class = "Flow"
            [[triggers]]
            name = "hourly"
            cron = "0 * * * *"
            """
        ),
        modules={"main.py": source},
    )
    cli.ok("deploy", str(project))
    listed = cli.json("workflows", "list")["workflows"]
    assert sorted(w["name"] for w in listed) == ["flow-a", "flow-b"]
    assert all(w["observed"]["ready"] is True for w in listed)
    assert "flow-a" in cli.ok("workflows", "list").stdout
    cli.ok("instances", "create", "flow-a", "--id", "a-1")
    cli.ok("instances", "create", "flow-b", "--id", "b-1")
    everything = cli.json("instances", "list")["instances"]  # no WORKFLOW: all of them
    assert sorted((row["workflow"], row["id"]) for row in everything) == [("flow-a", "a-1"), ("flow-b", "b-1")]
    assert "2 instance(s)" in cli.ok("instances", "list").stdout

    triggers = cli.json("triggers", "list")["triggers"]
    assert [(t["name"], t["spec"]["cron"]) for t in triggers] == [("hourly", "0 * * * *")]
    assert "hourly" in cli.ok("triggers", "list").stdout
    got = json.loads(cli.ok("resources", "get", "flow-a").stdout)
    assert got["name"] == "flow-a" and got["spec"]["className"] == "Flow"
    assert {r["name"] for r in cli.json("resources", "list", "--form", "DurableWorkflow")["resources"]} == {
        "flow-a", "flow-b"}
    cli.ok("triggers", "delete", "hourly")
    assert cli.json("triggers", "list") == {"triggers": []}
    # deleting the Worker is refused while resources refer to it: by name, with the code
    refused = cli.fails("resources", "delete", "tools")
    assert refused.startswith("error: dependency_conflict: delete ModuleWorker tools (")
    # a wrong --space says that the Space or the token is wrong
    wrong = Cli(url=cli.url, space=cli.space + "-nope", token=cli.token)
    line = wrong.fails("workflows", "list")
    assert line.startswith("error: not_found: ") and "the Space or the token is wrong" in line
    # help texts cite nothing that is not in the repository
    for command in (["runs"], ["instances", "history"], ["deploy"], ["resources"], ["triggers"]):
        assert "docs/spec/README.md" not in cli.ok(*command, "--help").stdout, command


def test_a_deploy_that_fails_leaves_nothing_half_made(cli: TourCli, tmp_path: pathlib.Path) -> None:
    toml = '[worker]\nname = "halfmade"\n[[workflows]]\nname = "half-flow"\nclass = "Flow"\n'
    broken = write_project(
        tmp_path / "syntax", toml=toml,
        modules={"main.py": "class Flow:\n    def run(self, event, step)\n        return None\n"},
    )
    line = cli.fails("deploy", str(broken))
    assert line == "error: syntax_error: main.py:2: expected ':'", line
    assert cli.json("resources", "list") == {"resources": []}  # nothing was created

    importing = write_project(
        tmp_path / "import", toml=toml,
        modules={"main.py": "import definitely_not_a_module_anywhere\n"},
    )
    result = cli.run("deploy", str(importing))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "definitely_not_a_module_anywhere" in result.stderr
    assert "(main.py, line 1)" in result.stderr  # the file and line (the sandbox names them)
    assert "nothing is left half-made: deleted what this deploy created" in result.stderr, result.stderr
    assert cli.json("resources", "list") == {"resources": []}  # the Version, Workflow, Worker: undone
    # code that imports but lacks the declared class: the Deployment is refused, and undone too
    classless = write_project(tmp_path / "classless", toml=toml, modules={"main.py": "X = 1\n"})
    result = cli.run("deploy", str(classless))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "\nerror: dependency_conflict: " in result.stderr, result.stderr
    assert "'Flow'" in result.stderr and "nothing is left half-made" in result.stderr, result.stderr
    assert cli.json("resources", "list") == {"resources": []}
    # fixed code deploys from there, and the workflow accepts instances
    fixed = write_project(
        tmp_path / "fixed", toml=toml,
        modules={"main.py": "class Flow:\n    def __init__(self, env):\n        pass\n"
                 "    def run(self, event, step):\n        return None\n"},
    )
    cli.ok("deploy", str(fixed))
    cli.ok("instances", "create", "half-flow", "--id", "h-1")
    deadline = time.monotonic() + 60
    while cli.json("status", "half-flow", "h-1")["status"] != "complete":
        assert time.monotonic() < deadline
        time.sleep(0.5)


def _readme_cron_handler() -> str:
    section = README.split("### Writing a cron handler", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


ECHO_PARAMS = textwrap.dedent(
    """

    class ReportWorkflow:
        def __init__(self, env):
            pass

        def run(self, event, step):
            return event.get("params")
    """
)


def test_the_readme_cron_handler_runs_for_a_match(cli: TourCli, tmp_path: pathlib.Path) -> None:
    """docs/spec/host-features.md#hf-newcomer: the README's ``scheduled`` example, deployed as written, is called for a
    match with ``{"cron", "scheduledTime"}`` (ms), its binding call lands, its ``wait_until`` work
    finishes, and the run is ``ok`` in ``takohost runs``."""
    project = write_project(
        tmp_path / "cron",
        toml=textwrap.dedent(
            """
            [worker]
            name = "cron-readme"
            [[workflows]]
            name = "reports"
            class = "ReportWorkflow"
            binding = "REPORTS"
            [[triggers]]
            name = "every-minute"
            cron = "* * * * *"
            """
        ),
        modules={"main.py": _readme_cron_handler() + ECHO_PARAMS},
    )
    cli.ok("deploy", str(project))
    deadline = time.monotonic() + 150
    while True:
        runs = cli.json("runs", "every-minute")["runs"]
        done = [r for r in runs if any(d.get("finishedAt") for d in r.get("deliveries") or [])]
        if done:
            break
        assert time.monotonic() < deadline, runs
        time.sleep(1)
    run = done[-1]
    assert [d["outcome"] for d in run["deliveries"]] == ["ok"], run
    assert run["cron"] == "* * * * *"
    import datetime as dt

    at = dt.datetime.fromisoformat(run["scheduledTime"].replace("Z", "+00:00"))  # the ledger: RFC 3339
    assert (at.second, at.microsecond) == (0, 0)
    instance_id = f"report-{at:%Y-%m-%dT%H:%M}"
    while cli.json("status", "reports", instance_id)["status"] != "complete":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert cli.json("status", "reports", instance_id)["output"] == {"cron": "* * * * *"}
