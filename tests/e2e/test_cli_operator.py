"""The ``takohost`` CLI as an operator uses it every day, against the real host (docs/spec/host-features.md#hf-console,
9, 10, 11, 13): console URLs printed, ``undeploy``, Ctrl-C without tracebacks (and an interrupted
deploy that says what is left), full-width tables in a pipe, and a ``takohost dev`` found from its
directory (``token create`` included)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.parse

import requests

from tests.e2e.test_cli_client import ECHO, Cli, write_project

TOML = """
    [worker]
    name = "{worker}"
    [vars]
    GREETING = "hello"
    [[workflows]]
    name = "{worker}-flow"
    class = "Echo"
    [[triggers]]
    name = "{worker}-nightly"
    cron = "0 3 * * *"
"""


SOURCE = ECHO + "\n\ndef scheduled(event, env, ctx):\n    print('nightly', event['scheduledTime'])\n"


def _project(tmp_path, worker: str, source: str = SOURCE):
    return write_project(tmp_path / worker, toml=TOML.format(worker=worker), modules={"main.py": source})


def _names(cli: Cli) -> set[str]:
    return {r["name"] for r in cli.json("resources", "list")["resources"]}


def _signed_in(url: str, token: str) -> requests.Session:
    session = requests.Session()
    answer = session.post(f"{url}/ui/sign-in", data={"token": token}, headers={"Origin": url}, timeout=10)
    assert answer.status_code == 200, answer.text
    return session


def test_the_cli_prints_console_urls_by_workflow_name(cli: Cli, tmp_path) -> None:
    project = _project(tmp_path, "urls")
    deployed = cli.ok("deploy", str(project))
    assert f"console: {cli.url}/ui/workflows/urls-flow" in deployed.stderr
    created = cli.ok("instances", "create", "urls-flow", "--id", "A 1/é")
    link = f"{cli.url}/ui/workflows/urls-flow/instance?" + urllib.parse.urlencode({"id": "A 1/é"})
    assert f"console: {link}" in created.stdout, created.stdout
    status = cli.ok("instances", "status", "urls-flow", "A 1/é")
    assert f"console: {link}" in status.stdout
    page = _signed_in(cli.url, cli.token).get(link, timeout=10)  # the printed link opens the page
    assert page.status_code == 200 and "A 1/é" in page.text, page.text[-800:]


def test_tables_are_not_cut_when_piped(cli: Cli, tmp_path) -> None:
    cli.ok("deploy", str(_project(tmp_path, "wide")))
    long_id = "order-" + "x" * 150 + "-end"
    cli.ok("instances", "create", "wide-flow", "--id", long_id)
    listed = cli.ok("instances", "list", "wide-flow", env={"COLUMNS": "80"})  # stdout is a pipe here
    assert long_id in listed.stdout, listed.stdout
    assert "…" not in listed.stdout


def test_undeploy_removes_what_deploy_made_after_asking(cli: Cli, tmp_path) -> None:
    project = _project(tmp_path, "gone")
    cli.ok("deploy", str(project))
    (project / "main.py").write_text(SOURCE + "\n# a second version\n", encoding="utf-8")
    second = cli.json("deploy", str(project))
    cli.ok("instances", "create", "gone-flow", "--id", "g-1")
    before = _names(cli)
    versions = {n for n in before if n.startswith("gone-") and n not in
                {"gone-flow", "gone-nightly", "gone-deployment"}}
    assert len(versions) == 2 and second["version"]["name"] in versions
    ours = {"gone", "gone-flow", "gone-nightly", "gone-deployment", *versions}
    assert ours <= before

    refused = cli.run("undeploy", str(project))  # stdin is not a terminal: no silent yes
    assert refused.returncode == 1 and "error: confirmation_required" in refused.stderr, refused.stderr
    assert ours <= _names(cli)

    done = cli.ok("undeploy", str(project), "--yes")
    order = [line.strip() for line in done.stderr.splitlines() if line.startswith("  ")]
    forms = [line.split()[0] for line in order]
    assert forms == ["WorkerCronTrigger", "DurableWorkflow", "WorkerDeployment", "WorkerVersion",
                     "WorkerVersion", "ModuleWorker"], done.stderr
    assert not (ours & _names(cli))
    again = cli.ok("undeploy", str(project), "--yes")
    assert "nothing to delete" in again.stderr


def _interrupt(args: list[str], *, env: dict, after: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", "host_cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_at_any_moment_prints_no_traceback(cli: Cli) -> None:
    env = {**os.environ, "TAKOHOST_URL": cli.url, "TAKOHOST_TOKEN": cli.token, "TAKOHOST_SPACE": cli.space}
    # The imports take ~0.6 s: the early signals land while the modules load, later ones in the command.
    for after in (0.25, 0.4, 0.6, 0.9):
        result = _interrupt(["instances", "list"], env=env, after=after)
        assert "Traceback" not in result.stderr, (after, result.stderr)
        # 0: done before the signal; -SIGINT: it came while the interpreter was exiting (silently)
        assert result.returncode in (0, 130, -signal.SIGINT), (after, result.returncode, result.stderr)
        if result.returncode == 130:
            assert result.stderr.strip().endswith("interrupted"), result.stderr


def test_an_interrupted_deploy_says_what_is_left_and_rerunning_converges(cli: Cli, tmp_path) -> None:
    project = _project(tmp_path, "halfway")
    env = {**os.environ, "TAKOHOST_URL": cli.url, "TAKOHOST_TOKEN": cli.token, "TAKOHOST_SPACE": cli.space}
    proc = subprocess.Popen([sys.executable, "-m", "host_cli", "deploy", str(project)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    err = b""
    deadline = time.monotonic() + 120
    while b"create DurableWorkflow halfway-flow" not in err:  # the Worker is made: interrupt the rest
        assert proc.poll() is None and time.monotonic() < deadline, err.decode()
        ready, _, _ = select.select([proc.stderr], [], [], 1)
        if ready:
            err += os.read(proc.stderr.fileno(), 65536)
    proc.send_signal(signal.SIGINT)
    rest_out, rest_err = proc.communicate(timeout=60)
    text = (err + rest_err).decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text
    assert "error: interrupted: deploy was interrupted" in text
    assert "done: ModuleWorker halfway" in text
    left = re.search(r"left: (.*)", text).group(1)
    assert "WorkerDeployment" in left and "WorkerCronTrigger halfway-nightly" in left, left
    assert "re-run `takohost deploy` on this directory: it converges" in text
    summary = cli.json("deploy", str(project))  # re-running finishes the job
    assert summary["deployment"]["name"] == "halfway-deployment"
    assert {"halfway", "halfway-flow", "halfway-nightly", "halfway-deployment"} <= _names(cli)


def test_a_running_dev_is_found_from_its_directory(tmp_path) -> None:
    """No TAKOHOST_URL/TAKOHOST_TOKEN: commands in the directory of a running ``takohost dev``
    reach it, and ``token create`` makes another Space's token in its database."""
    from tests.integration.test_cli import _wait_running
    from tests.support import processes

    port = processes.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOHOST_")}
    cwd = tmp_path / "app"
    cwd.mkdir()
    dev = subprocess.Popen([sys.executable, "-m", "host_cli", "dev", "--port", str(port)], cwd=cwd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                           start_new_session=True)

    def takohost(*args: str, where=cwd) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "host_cli", *args], cwd=where, env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    try:
        _wait_running(dev)
        listed = takohost("resources", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"resources": []}
        made = takohost("token", "create", "--space", "second")
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        assert token.startswith("tko_"), made.stdout
        as_second = takohost("resources", "list", "--json", "--space", "second", "--token", token)
        assert as_second.returncode == 0, as_second.stderr
        made_elsewhere = takohost("token", "create", "--space", "third", "--data-dir", str(cwd / ".takohost"),
                                  where=tmp_path)
        assert made_elsewhere.returncode == 0, made_elsewhere.stderr
        # Another directory has no dev: the CLI says it has no token, as before.
        lost = takohost("resources", "list", where=tmp_path)
        assert lost.returncode == 1 and "error: unauthenticated" in lost.stderr
    finally:
        if dev.poll() is None:
            os.kill(dev.pid, signal.SIGTERM)
            try:
                dev.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
    # Stopped: the file that pointed at it is gone, and nothing finds a stopped dev.
    assert not (cwd / ".takohost" / "dev.json").exists()
    assert takohost("resources", "list").returncode == 1



DICE = """
import random

class Dice:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        step.do("roll-%d" % random.randrange(10**9), lambda: {"n": 1})
        step.sleep("nap", 1)
        return {"rolled": True}
"""


def test_status_flags_a_replay_divergence(cli: Cli, tmp_path) -> None:
    project = write_project(tmp_path / "dice", toml="""
        [worker]
        name = "dice"
        [[workflows]]
        name = "dice-flow"
        class = "Dice"
    """, modules={"main.py": DICE})
    cli.ok("deploy", str(project))
    cli.ok("instances", "create", "dice-flow", "--id", "d-1")
    cli.wait_status("dice-flow", "d-1", "complete")
    shown = cli.ok("status", "dice-flow", "d-1").stdout
    assert re.search(r"warning\s+replay diverged at step 'roll-\d+': replay skipped \d recorded step", shown), shown
