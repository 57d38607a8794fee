"""``takohost versions check DIR``: replay a candidate Version's code against the recorded history
of every live instance of its workflows before it gets traffic (docs/spec/host-features.md#hf-testing; docs/testing.md
"Checking a candidate against live instances").

For each ``[[workflows]]`` entry of ``DIR/takohost.toml`` that is deployed in the Space, every
non-terminal instance (and, with ``--terminal N``, the N most recently created terminal ones) is
read over the HTTP API (its history and status) and replayed against ``DIR``'s code with
``takohost.testing.replay``: the same comparison the test kit makes, stopping at the first step
without a recorded result, running no effect and reading no event. Each instance is
``compatible``, ``diverged at step K (…)`` or ``error (…)``. The replay runs on this machine, in
this process (the candidate is the caller's own code), bounded per instance and in all.

``takohost versions check NAME`` (a created WorkerVersion, by name or UID) asks the host instead
(``host_cli.replay_check``): the replay runs in the host's sandbox, bounded by the host's settings.

It proves incompatibility with the recorded histories, never compatibility in general.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from host_cli import client as http
from host_cli import common, replay_check
from host_cli import instances as cli_instances
from host_cli import manifest as manifests
from host_cli.errors import CommandFailed

TERMINAL = ("complete", "errored", "terminated")


@click.group("versions")
def versions() -> None:
    """Check a candidate Version's code against live instances."""


def _instances(api: http.Client, workflow_uid: str, *, terminal: int) -> list[dict[str, Any]]:
    rows = list(api.iter_instances(workflow_uid))
    live = [row for row in rows if row.get("status") not in TERMINAL]
    ended = sorted((row for row in rows if row.get("status") in TERMINAL), key=lambda r: r.get("createdAt", ""), reverse=True)
    return live + ended[:terminal]


def _check_one(
    api: http.Client, *, workflow: Any, name: str, uid: str, row: dict[str, Any], timeout: float
) -> dict[str, Any]:
    from takohost import testing  # here: the test kit costs every other command 0.1 s to import

    instance_id = row["id"]
    result: dict[str, Any] = {"workflow": name, "id": instance_id, "status": row.get("status")}
    started = time.perf_counter()
    try:
        recorded = cli_instances.recorded_history(api, uid, instance_id, workflow=name)
        replayed = testing.replay(workflow, recorded, timeout=timeout)
    except TimeoutError:
        result.update(result="error", message=f"the code ran {timeout:g} s without a step request (time limit)")
    except http.ClientError as exc:
        result.update(result="error", message=f"could not read the instance: {exc}")
    except Exception as exc:  # noqa: BLE001 - one instance's failure is reported, the others go on
        result.update(result="error", message=f"{type(exc).__name__}: {exc}")
    else:
        if replayed.ok:
            result.update(result="compatible", message=replayed.message, replayed=replayed.replayed)
        else:
            d = replayed.divergence
            assert d is not None
            result.update(
                result="diverged",
                message=d.message,
                step=d.index,
                expected=d.expected,
                found=d.found,
            )
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


@versions.command("check")
@click.argument("directory", metavar="DIR|VERSION")
@click.option("--terminal", default=0, show_default=True, type=click.IntRange(min=0), help="Also check the N most recent terminal instances of each workflow.")
@click.option("--instance-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.01), help="Seconds the code may run without a step request, per instance.")
@click.option("--total-timeout", default=300.0, show_default=True, type=click.FloatRange(min=0.01), help="Seconds for the whole check; instances left are reported as not checked.")
@common.json_client_command
def versions_check(
    api: http.Client,
    *,
    directory: str,
    terminal: int,
    instance_timeout: float,
    total_timeout: float,
    as_json: bool,
) -> None:
    """Replay DIR's code (here), or a created VERSION (on the host, in its sandbox), against the
    history of every live instance of its deployed workflows.

    Exit 1 when any instance diverged, or could not be checked; 0 when every checked history
    replays. A replay runs no effect and reads no event. For a VERSION the host's time limits apply
    (TAKOHOST_REPLAY_CHECK_*_TIMEOUT_S), not --instance-timeout; --total-timeout bounds the wait.
    """
    if not os.path.isdir(directory):
        _check_created(api, directory, terminal=terminal, timeout=total_timeout, as_json=as_json)
        return
    from takohost import testing

    project = manifests.load_project(directory)
    deployed = {r["name"]: r["uid"] for r in api.iter_resources(form=http.FORM_URLS["DurableWorkflow"])}
    deadline = time.monotonic() + total_timeout
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    for decl in project.manifest.workflows:
        uid = deployed.get(decl.name)
        if uid is None:
            skipped.append(decl.name)
            continue
        workflow = testing.workflow(directory, class_name=decl.class_name)
        rows = _instances(api, uid, terminal=terminal)
        for number, row in enumerate(rows, start=1):
            if time.monotonic() >= deadline:
                results.append({"workflow": decl.name, "id": row["id"], "status": row.get("status"), "result": "not_checked", "message": "the check's time limit was reached"})
                continue
            result = _check_one(api, workflow=workflow, name=decl.name, uid=uid, row=row, timeout=instance_timeout)
            results.append(result)
            if not as_json:
                common.stderr.print(f"[{number}/{len(rows)}] {escape(decl.name)} {escape(row['id'])}: {_line(result)}")
    totals = {kind: sum(1 for r in results if r["result"] == kind) for kind in ("compatible", "diverged", "error", "not_checked")}
    if as_json:
        common.emit_json({"directory": directory, "instances": results, "totals": totals, "notDeployed": skipped})
    else:
        for name in skipped:
            common.stderr.print(f"{escape(name)}: not deployed in Space {escape(api.space)}; nothing to check")
        common.stderr.print(
            f"{totals['compatible']} compatible, {totals['diverged']} diverged, {totals['error']} error(s), "
            f"{totals['not_checked']} not checked"
        )
    if totals["diverged"] or totals["error"] or totals["not_checked"]:
        raise CommandFailed(
            "incompatible" if totals["diverged"] else "check_incomplete",
            f"{totals['diverged']} instance(s) diverged, {totals['error'] + totals['not_checked']} not checked",
        )


def _check_created(api: http.Client, target: str, *, terminal: int, timeout: float, as_json: bool) -> None:
    """``versions check VERSION``: the host's check of a created WorkerVersion (name or UID)."""
    version = next(
        (r for r in api.iter_resources(form=http.FORM_URLS["WorkerVersion"]) if target in (r["name"], r["uid"])), None
    )
    if version is None:
        raise CommandFailed(
            "not_found", f"{target!r} is neither a directory nor a WorkerVersion of Space {api.space!r}",
            "`takohost resources list --form WorkerVersion` lists the Versions",
        )

    def show(progress: dict[str, Any]) -> None:
        if not as_json:
            common.stderr.print(f"[{progress['checked']}/{progress['total']}] {replay_check.totals_line(progress['totals'])}")

    check = replay_check.run(api, version["uid"], terminal=terminal, timeout=timeout + 60, on_progress=show)
    if as_json:
        common.emit_json({"version": {"name": version["name"], "uid": version["uid"]}, **check})
        failure = None if check.get("passed") else replay_check.failed(check, console=Console(stderr=True, quiet=True))
    else:
        failure = replay_check.failed(check, console=common.stderr)
        common.stderr.print(replay_check.totals_line(check.get("totals") or {}))
    if failure is not None:
        raise failure


def _line(result: dict[str, Any]) -> str:
    if result["result"] == "diverged":
        return f"[red]diverged at step {result['step']}[/red] ({escape(result['message'])})"
    if result["result"] == "compatible":
        return "[green]compatible[/green]"
    return f"[yellow]{result['result']}[/yellow] ({escape(result['message'])})"
