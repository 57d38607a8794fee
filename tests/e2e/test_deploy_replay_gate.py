"""``takohost deploy`` checks a new Version against the live instances before it gets traffic
(docs/spec/host-features.md#hf-testing; docs/testing.md "Checking a candidate against live
instances"), and ``takohost versions check NAME`` asks the host for the same check — through the
CLI as a user runs it, against the session's real API, worker and beat processes.

A step renamed under two waiting instances: ``deploy`` lists both, exits 1, deletes the Version it
created and leaves the Deployment on the old code; a step added after the last recorded one
deploys; ``--force`` deploys the diverging code anyway.
"""

from __future__ import annotations

import json
import pathlib
import textwrap

from tests.e2e.test_cli_client import Cli, write_project

TOML = """
    [worker]
    name = "gated"
    [[workflows]]
    name = "gated-flow"
    class = "Gated"
"""

CODE = textwrap.dedent(
    """
    class Gated:
        def __init__(self, env):
            self.env = env

        def run(self, event, step):
            first = step.do("fetch", lambda: {"n": 1})
            got = step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
            return {"first": first, "got": got}
    """
)


def _deployed_version(cli: Cli) -> str:
    """The UID of the one Version with weight in the Worker's (only) Deployment."""
    (deployment,) = cli.json("resources", "list", "--form", "WorkerDeployment")["resources"]
    (entry,) = [v for v in deployment["spec"]["versions"] if v["weight"] > 0]
    return entry["version"]["resourceUid"]


def _versions(cli: Cli) -> set[str]:
    return {r["uid"] for r in cli.json("resources", "list", "--form", "WorkerVersion")["resources"]}


def test_deploy_refuses_a_version_that_diverges_from_live_instances_unless_forced(
    cli: Cli, tmp_path: pathlib.Path
) -> None:
    project = write_project(tmp_path / "v1", toml=TOML, modules={"main.py": CODE})
    first = json.loads(cli.ok("deploy", str(project), "--json").stdout)
    for instance_id in ("live-1", "live-2"):
        cli.ok("instances", "create", "gated-flow", "--id", instance_id)
    for instance_id in ("live-1", "live-2"):
        cli.wait_status("gated-flow", instance_id, "waiting", timeout=90)
    assert _deployed_version(cli) == first["version"]["uid"]

    # the host's check of the deployed Version, by name: both live instances replay
    same = cli.json("versions", "check", first["version"]["name"])
    assert same["passed"] is True, same
    assert same["totals"] == {"compatible": 2, "diverged": 0, "error": 0, "not_checked": 0}

    renamed = write_project(tmp_path / "renamed", toml=TOML, modules={"main.py": CODE.replace('"fetch"', '"load"')})
    before = _versions(cli)
    refused = cli.run("deploy", str(renamed))
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.count("diverged at step 1") == 2, refused.stderr
    assert "live-1" in refused.stderr and "live-2" in refused.stderr
    assert "error: incompatible: 2 instance(s) diverged" in refused.stderr
    assert "nothing was deployed; fix the code, or re-run with --force" in " ".join(refused.stderr.split())
    assert _deployed_version(cli) == first["version"]["uid"]  # the traffic stayed on the old code
    assert _versions(cli) == before  # the Version this deploy created was deleted again

    added = write_project(
        tmp_path / "added",
        toml=TOML,
        modules={"main.py": CODE.replace("        return {", '        step.do("audit", dict)\n        return {')},
    )
    assert 'step.do("audit"' in (added / "main.py").read_text()
    compatible = cli.ok("deploy", str(added), "--json")
    said = " ".join(compatible.stderr.split())  # rich wraps at the terminal's width
    assert "the live instances: 2 compatible, 0 diverged, 0 error(s), 0 not checked" in said, said
    second = json.loads(compatible.stdout)["version"]["uid"]
    assert _deployed_version(cli) == second != first["version"]["uid"]

    forced = cli.ok("deploy", str(renamed), "--force", "--json")
    assert "deploying anyway (--force)" in " ".join(forced.stderr.split()), forced.stderr
    assert _deployed_version(cli) == json.loads(forced.stdout)["version"]["uid"] not in (first["version"]["uid"], second)
