"""The ``takohost`` CLI client against the real host (API + worker + beat processes): deploy,
every ``instances`` command with ``--json``, and the error paths (docs/spec/host-features.md#hf-one-command)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from tests.support import processes


@dataclass
class Cli:
    """Runs ``python -m host_cli …`` against one host URL, Space and token."""

    url: str
    space: str
    token: str

    def run(self, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TAKOHOST_URL": self.url,
            "TAKOHOST_SPACE": self.space,
            "TAKOHOST_TOKEN": self.token,
            **(env or {}),
        }
        return subprocess.run(
            [sys.executable, "-m", "host_cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess[str]:
        """Run and require exit status 0 (failing with the command's output otherwise)."""
        result = self.run(*args, timeout=timeout, env=env)
        assert result.returncode == 0, f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr
        return result

    def json(self, *args: str, timeout: float = 180) -> dict:
        """Run with ``--json`` and return the one JSON document printed on stdout."""
        return json.loads(self.ok(*args, "--json", timeout=timeout).stdout)

    def fails(self, *args: str) -> str:
        """Run, require exit status 1 without a traceback, and return the first stderr line."""
        result = self.run(*args)
        assert result.returncode == 1, f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr + result.stdout
        return result.stderr.splitlines()[0]

    def wait_status(self, workflow: str, instance_id: str, wanted: str, *, timeout: float = 60) -> dict:
        """Poll ``instances status --json`` until ``status == wanted``."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.json("instances", "status", workflow, instance_id)
            if answer["status"] == wanted:
                return answer
            assert time.monotonic() < deadline, f"{instance_id!r} is {answer}, not {wanted!r}"
            time.sleep(0.5)


ECHO = textwrap.dedent(
    """
    class Echo:
        def __init__(self, env):
            self.greeting = env.GREETING

        def run(self, event, step):
            got = step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
            return {"greeting": self.greeting, "params": event.get("params"), "got": got}
    """
)

SECOND = textwrap.dedent(
    """
    class Second:
        def __init__(self, env):
            self.env = env

        def run(self, event, step):
            return {"echo": env_names(self.env)}


    def env_names(env):
        return sorted(name for name in vars(env))
    """
)


def write_project(root: pathlib.Path, *, toml: str, modules: dict[str, str]) -> pathlib.Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "takohost.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    for name, source in modules.items():
        (root / name).write_text(source, encoding="utf-8")
    return root


ECHO_TOML = """
    [worker]
    name = "echo"
    [vars]
    GREETING = "hello"
    [[workflows]]
    name = "echo-flow"
    class = "Echo"
    binding = "ECHO"
"""


def test_deploy_is_idempotent_and_updates_in_place(cli: Cli, tmp_path: pathlib.Path) -> None:
    project = write_project(tmp_path / "echo", toml=ECHO_TOML, modules={"main.py": ECHO})
    first = cli.json("deploy", str(project))
    assert first["space"] == cli.space
    assert first["worker"]["name"] == "echo"
    assert first["deployment"]["name"] == "echo-deployment"
    assert first["version"]["name"].startswith("echo-")
    assert [(w["name"], w["className"], w["binding"]) for w in first["workflows"]] == [
        ("echo-flow", "Echo", "ECHO")
    ]

    again = cli.ok("deploy", str(project))  # same content: nothing new
    assert "up to date" in again.stderr
    assert json.loads(cli.ok("deploy", str(project), "--json").stdout) == first

    # New code and a new workflow with a binding: a new Version, the same Deployment updated.
    (project / "main.py").write_text(ECHO + "\n" + SECOND, encoding="utf-8")
    (project / "takohost.toml").write_text(
        textwrap.dedent(ECHO_TOML)
        + '[[workflows]]\nname = "second-flow"\nclass = "Second"\nbinding = "SECOND"\n',
        encoding="utf-8",
    )
    second = cli.json("deploy", str(project))
    assert second["worker"] == first["worker"]
    assert second["deployment"] == first["deployment"]
    assert second["version"]["uid"] != first["version"]["uid"]
    assert [w["name"] for w in second["workflows"]] == ["echo-flow", "second-flow"]
    cli.ok("instances", "create", "second-flow", "--id", "s-1")
    done = json.loads(cli.ok("status", "second-flow", "s-1", "--watch", "--timeout", "90", "--json").stdout)
    assert done["status"] == "complete"
    assert done["output"] == {"echo": ["ECHO", "GREETING", "SECOND"]}


def test_instances_commands_round_trip_an_awkward_id(cli: Cli, tmp_path: pathlib.Path) -> None:
    cli.ok("deploy", str(write_project(tmp_path / "echo", toml=ECHO_TOML, modules={"main.py": ECHO})))
    awkward = "order/42 ?%#😀 ."
    created = cli.json("instances", "create", "echo-flow", "--id", awkward, "--params", '{"n": 1}')
    assert created == {"id": awkward}
    assert cli.fails("instances", "create", "echo-flow", "--id", awkward).startswith(
        "error: instance_exists: "
    )

    cli.wait_status("echo-flow", awkward, "waiting")
    listed = cli.json("instances", "list", "echo-flow")
    assert [row["id"] for row in listed["instances"]] == [awkward]
    assert cli.json("instances", "list", "echo-flow", "--status", "complete") == {"instances": []}
    table = cli.ok("instances", "list", "echo-flow").stdout
    assert "waiting" in table and "1 instance(s)" in table

    sent = cli.json("instances", "send-event", "echo-flow", awkward, "go", "--payload", '{"ok": true}')
    assert sent == {"accepted": True, "id": awkward, "type": "go"}
    final = json.loads(cli.ok("status", "echo-flow", awkward, "--watch", "--timeout", "90", "--json").stdout)
    assert final == {
        "id": awkward,
        "status": "complete",
        "output": {"greeting": "hello", "params": {"n": 1}, "got": {"ok": True}},
    }
    watched = cli.ok("instances", "status", "echo-flow", awkward, "--watch", "--timeout", "30")
    assert "complete" in watched.stdout

    history = cli.json("instances", "history", "echo-flow", awkward)["events"]
    types = [event["eventType"] for event in history]
    assert types[0] == "InstanceCreated" and types[-1] == "InstanceCompleted"
    assert "EventAccepted" in types and "WaitStarted" in types
    assert [event["eventId"] for event in history] == list(range(1, len(history) + 1))
    assert "InstanceCompleted" in cli.ok("instances", "history", "echo-flow", awkward).stdout

    assert cli.fails("instances", "send-event", "echo-flow", awkward, "go").startswith(
        "error: instance_terminal: "
    )


def test_terminate(cli: Cli, tmp_path: pathlib.Path) -> None:
    cli.ok("deploy", str(write_project(tmp_path / "echo", toml=ECHO_TOML, modules={"main.py": ECHO})))
    cli.ok("instances", "create", "echo-flow", "--id", "t-1")
    cli.wait_status("echo-flow", "t-1", "waiting")
    assert cli.json("instances", "terminate", "echo-flow", "t-1") == {"id": "t-1", "status": "terminated"}
    assert cli.json("instances", "terminate", "echo-flow", "t-1") == {"id": "t-1", "status": "terminated"}
    assert cli.json("status", "echo-flow", "t-1")["status"] == "terminated"


def test_error_paths_print_code_and_message(cli: Cli, tmp_path: pathlib.Path) -> None:
    cli.ok("deploy", str(write_project(tmp_path / "echo", toml=ECHO_TOML, modules={"main.py": ECHO})))
    assert cli.fails("instances", "status", "echo-flow", "nobody").startswith("error: unknown_instance: ")
    assert cli.fails("instances", "status", "no-such-flow", "x") == (
        f"error: not_found: no DurableWorkflow named 'no-such-flow' in Space {cli.space!r}"
    )
    assert cli.fails("instances", "create", "echo-flow", "--params", '{"a": 1, "a": 2}').startswith(
        "error: invalid_json: "
    )
    # Rejected by the host: the id is 257 characters.
    assert cli.fails("instances", "create", "echo-flow", "--id", "x" * 257).startswith(
        "error: invalid_request: "
    )

    bad_token = Cli(url=cli.url, space=cli.space, token="not-a-token")
    assert bad_token.fails("instances", "list", "echo-flow").startswith("error: unauthenticated: ")
    nowhere = Cli(url=f"http://127.0.0.1:{processes.free_port()}", space=cli.space, token=cli.token)
    assert (
        nowhere.fails("instances", "list", "echo-flow")
        == f"error: unreachable: cannot reach the host at {nowhere.url}"
    )


def test_deploy_reports_the_failed_operation(cli: Cli, tmp_path: pathlib.Path) -> None:
    project = write_project(
        tmp_path / "broken",
        toml='[worker]\nname = "broken"\n',
        modules={"main.py": "import definitely_not_a_module_anywhere\n"},
    )
    result = cli.run("deploy", str(project))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    first = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(first) == 1
    assert "definitely_not_a_module_anywhere" in first[0]
    assert "while: create WorkerVersion broken-" in result.stderr

    bad_manifest = write_project(
        tmp_path / "typo", toml='[worker]\nname = "typo"\nmian = "main.py"\n', modules={"main.py": ""}
    )
    line = cli.fails("deploy", str(bad_manifest))
    assert line.startswith("error: invalid_manifest: ") and "worker.mian: unknown key" in line


RETRYING = textwrap.dedent(
    """
    from takohost import StepFailed, WaitTimeout


    def flaky():
        raise RuntimeError("every attempt fails")


    class Exported:
        def __init__(self, env):
            self.env = env

        def run(self, event, step):
            try:
                first = step.do("flaky", flaky, {"maxAttempts": 2, "initialDelaySeconds": 0})
            except StepFailed as failure:
                first = {"failed": failure.message}
            step.sleep("nap", 1)
            try:
                got = step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
            except WaitTimeout:
                got = None
            return {"first": first, "got": got, "n": event["params"]["n"]}
    """
)
EXPORTED_TOML = """
    [worker]
    name = "exported"
    [[workflows]]
    name = "exported-flow"
    class = "Exported"
"""


def test_an_exported_history_replays_against_the_code_and_shows_a_renamed_step(
    cli: Cli, tmp_path: pathlib.Path
) -> None:
    """docs/spec/host-features.md#hf-testing: ``instances history --export`` writes a replayable file from the real host;
    ``takohost.testing.replay`` replays it against the deployed directory (compatible) and against
    a candidate that renamed a step (the divergence, at its index)."""
    from takohost import testing

    project = write_project(tmp_path / "exported", toml=EXPORTED_TOML, modules={"main.py": RETRYING})
    cli.ok("deploy", str(project))
    cli.ok("instances", "create", "exported-flow", "--id", "x-1", "--params", '{"n": 5}')
    cli.wait_status("exported-flow", "x-1", "waiting", timeout=90)
    waiting_file = tmp_path / "waiting.json"
    answer = cli.json("instances", "history", "exported-flow", "x-1", "--export", str(waiting_file))
    assert answer["exported"] == str(waiting_file) and answer["status"] == "waiting"
    exported = json.loads(waiting_file.read_text())
    assert exported["format"] == testing.FORMAT and exported["instanceId"] == "x-1"
    assert exported["events"][0]["attributes"] == {"instanceId": "x-1", "params": {"n": 5}}
    assert "StepAttemptFailed" in [e["eventType"] for e in exported["events"]]  # the retry is recorded

    result = testing.replay(project, waiting_file)
    assert result.ok and result.replayed == 2 and result.stopped_at == "go", result.message
    renamed = tmp_path / "renamed"
    write_project(renamed, toml=EXPORTED_TOML, modules={"main.py": RETRYING.replace('"nap"', '"rest"')})
    divergence = testing.replay(renamed, waiting_file).divergence
    assert divergence is not None and divergence.index == 2
    assert (divergence.expected["name"], divergence.found["name"]) == ("nap", "rest")

    cli.json("instances", "send-event", "exported-flow", "x-1", "go", "--payload", '{"ok": true}')
    cli.wait_status("exported-flow", "x-1", "complete", timeout=90)
    done_file = tmp_path / "done.json"
    assert "written to" in cli.ok("instances", "history", "exported-flow", "x-1", "--export", str(done_file)).stdout
    done = testing.replay(project, done_file)
    assert done.ok and done.stopped_at is None, done.message
    failed = "step failed after 2 attempts: RuntimeError: every attempt fails"
    assert done.outcome == {"status": "complete", "output": {"first": {"failed": failed}, "got": {"ok": True}, "n": 5}}


def test_versions_check_replays_a_candidate_against_every_live_instance(cli: Cli, tmp_path: pathlib.Path) -> None:
    """docs/spec/host-features.md#hf-testing (the CLI's part): ``takohost versions check DIR`` replays DIR's code against
    the history of each live instance (and ``--terminal N`` ended ones): compatible, diverged at
    step K, or error (an endless run under the per-instance time limit); exit 1 unless all replay."""
    project = write_project(tmp_path / "exported", toml=EXPORTED_TOML, modules={"main.py": RETRYING})
    cli.ok("deploy", str(project))
    for instance_id in ("live-1", "live-2", "done-1"):
        cli.ok("instances", "create", "exported-flow", "--id", instance_id, "--params", '{"n": 1}')
    for instance_id in ("live-1", "live-2", "done-1"):
        cli.wait_status("exported-flow", instance_id, "waiting", timeout=90)
    cli.ok("instances", "send-event", "exported-flow", "done-1", "go")
    cli.wait_status("exported-flow", "done-1", "complete", timeout=90)

    same = cli.json("versions", "check", str(project))
    assert same["totals"] == {"compatible": 2, "diverged": 0, "error": 0, "not_checked": 0}
    assert sorted(r["id"] for r in same["instances"]) == ["live-1", "live-2"]
    with_ended = cli.json("versions", "check", str(project), "--terminal", "1")
    assert with_ended["totals"]["compatible"] == 3

    added = write_project(
        tmp_path / "added",
        toml=EXPORTED_TOML,
        modules={"main.py": RETRYING.replace('        return {"first"', '        step.do("audit", dict)\n        return {"first"')},
    )
    assert 'step.do("audit"' in (added / "main.py").read_text()
    assert cli.json("versions", "check", str(added))["totals"]["compatible"] == 2

    renamed = write_project(tmp_path / "renamed", toml=EXPORTED_TOML, modules={"main.py": RETRYING.replace('"nap"', '"rest"')})
    result = cli.run("versions", "check", str(renamed), "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    body = json.loads(result.stdout)
    assert body["totals"]["diverged"] == 2
    first = body["instances"][0]
    assert (first["result"], first["step"], first["expected"]["name"], first["found"]["name"]) == ("diverged", 2, "nap", "rest")
    assert "error: incompatible: 2 instance(s) diverged" in result.stderr
    shown = cli.run("versions", "check", str(renamed))
    assert "diverged at step 2" in shown.stderr and "0 compatible, 2 diverged" in shown.stderr

    endless = write_project(
        tmp_path / "endless",
        toml=EXPORTED_TOML,
        modules={"main.py": RETRYING.replace("    def run(self, event, step):\n", "    def run(self, event, step):\n        while True:\n            pass\n")},
    )
    assert "while True" in (endless / "main.py").read_text()
    hung = cli.run("versions", "check", str(endless), "--json", "--instance-timeout", "0.5")
    assert hung.returncode == 1
    results = json.loads(hung.stdout)["instances"]
    assert {r["result"] for r in results} == {"error"} and "time limit" in results[0]["message"]
