"""The client half of the ``takohost`` command (docs/spec/host-features.md#hf-one-command; docs/spec/architecture.md#ar-operating): the ``deploy DIR``,
``undeploy DIR`` and ``runs TRIGGER`` commands, and the registration of every client command on the ``takohost`` group.

The ``instances …`` and ``status`` commands are ``host_cli.instances``; the deploy engine is
``host_cli.deploy``; connection options, output and error conventions are ``host_cli.common``.

Registration: ``host_cli.main`` calls :func:`register` on its ``main`` group.
"""

from __future__ import annotations

import datetime as dt
import sys

import click
from rich.markup import escape
from rich.table import Table

from host_cli import client as http
from host_cli import common, resource_commands
from host_cli import deploy as deploy_engine
from host_cli import instances as cli_instances
from host_cli import logs as cli_logs
from host_cli import manifest as manifests
from host_cli import spaces as cli_spaces
from host_cli import undeploy as undeploy_engine
from host_cli import versions as cli_versions
from host_cli.errors import CommandFailed

__all__ = ["register"]


# --- cron runs ------------------------------------------------------------------------------


@click.command("runs")
@click.argument("trigger")
@common.json_client_command
def runs(api: http.Client, *, trigger: str, as_json: bool) -> None:
    """List the recorded and skipped matches of a cron TRIGGER (name or UID), newest first, with
    the ids of the instances each run's handler started."""
    rows = list(api.iter_runs(common.resolve(api, trigger, form="WorkerCronTrigger")))
    if as_json:
        common.emit_json({"runs": rows})
        return
    table = Table("SCHEDULED", "CRON", "RECORDED", "OUTCOME", "STARTED")
    for run in rows:
        scheduled = run.get("scheduledTime")
        if isinstance(scheduled, int):
            scheduled = dt.datetime.fromtimestamp(scheduled / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        deliveries = run.get("deliveries") or []
        outcome = ", ".join(str(d.get("outcome")) for d in deliveries) or str(run.get("outcome", "pending"))
        if run.get("reason"):
            outcome += f" ({run['reason']})"
        failed = [d["error"] for d in deliveries if d.get("error")]
        if failed:
            outcome += f": {failed[-1] if isinstance(failed[-1], str) else common.compact(failed[-1])}"
        started = [str(i.get("id")) for d in deliveries for i in d.get("instances") or []]
        table.add_row(
            str(scheduled),
            escape(str(run.get("cron", ""))),
            str(run.get("recordedAt", "")),
            escape(common.visible(outcome)),
            escape(common.visible(", ".join(started))),
        )
    console = common.stdout_console()
    console.print(table)
    console.print(f"{len(rows)} match(es)")


# --- deploy ---------------------------------------------------------------------------------

_OPERATION_TIMEOUT = click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds to wait for each Operation.",
)


@click.command("deploy")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@_OPERATION_TIMEOUT
@click.option(
    "--force",
    is_flag=True,
    help="Give the new Version the traffic even if live instances diverge when replayed on it.",
)
@common.json_client_command
def deploy(api: http.Client, *, directory: str, timeout: float, force: bool, as_json: bool) -> None:
    """Create or update the Worker, a new Version, the Deployment, workflows and cron triggers of DIR.

    DIR holds takohost.toml and the worker's .py files. Re-running is safe: every mutation
    carries an Idempotency-Key derived from its content. Before a new Version replaces the
    deployed one, the host replays it against every live instance: if any diverges, the
    instances are listed and nothing is deployed (exit 1) unless --force.
    """
    project = manifests.load_project(directory)
    summary = deploy_engine.Deployer(api, console=common.stderr, timeout=timeout, force=force).run(project)
    if as_json:
        common.emit_json(summary)
    else:
        common.stderr.print(
            f"[green]deployed[/green] {escape(project.manifest.worker)} "
            f"(version {escape(summary['version']['name'])}) to Space {escape(api.space)}"
        )
        for wf in summary["workflows"]:
            common.stderr.print(f"console: {escape(common.console_url(api, workflow=wf['name']))}", soft_wrap=True)


@click.command("undeploy")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--yes", "-y", "assume_yes", is_flag=True, help="Delete without asking.")
@_OPERATION_TIMEOUT
@common.json_client_command
def undeploy(api: http.Client, *, directory: str, assume_yes: bool, timeout: float, as_json: bool) -> None:
    """Delete what `takohost deploy DIR` made: DIR's cron triggers and workflows (with their
    instances), the Worker's Deployment and every Version, then the Worker; asks first (--yes
    does not). Re-running after an interruption finishes the job."""
    project = manifests.load_project(directory)
    doomed = undeploy_engine.plan(list(api.iter_resources()), project.manifest)
    if not doomed:
        common.stderr.print(
            f"nothing to delete: Space {escape(api.space)} has no ModuleWorker {escape(project.manifest.worker)}"
        )
        if as_json:
            common.emit_json({"deleted": []})
        return
    common.stderr.print(f"In Space {escape(api.space)}, undeploy deletes, in this order:")
    for item in doomed:
        note = " (and all its instances and their history)" if item.form == "DurableWorkflow" else ""
        common.stderr.print(f"  {escape(item.label)}{note}")
    if not assume_yes:
        if not sys.stdin.isatty():
            raise CommandFailed("confirmation_required", "undeploy asks before deleting: pass --yes to go ahead")
        if not click.confirm(f"Delete these {len(doomed)} resources?", default=False, err=True):
            raise CommandFailed("cancelled", "nothing was deleted")
    deleted = undeploy_engine.Undeployer(api, console=common.stderr, timeout=timeout).delete(doomed)
    if as_json:
        common.emit_json({"deleted": [{"form": d.form, "name": d.name, "uid": d.uid} for d in doomed]})
    else:
        common.stderr.print(f"[green]undeployed[/green] {len(deleted)} resource(s) from Space {escape(api.space)}")


# --- registration ---------------------------------------------------------------------------

_COMMANDS: tuple[click.Command, ...] = (
    deploy,
    undeploy,
    cli_instances.instances,
    cli_instances.status_alias,
    runs,
    cli_logs.run_logs,
    resource_commands.workflows,
    resource_commands.triggers,
    resource_commands.resources,
    cli_spaces.spaces,
    cli_versions.versions,
)


def register(group: click.Group) -> None:
    """Add the client commands to ``group`` (idempotent: a command of the same name is replaced)."""
    for command in _COMMANDS:
        group.add_command(command)
    cli_instances.instances.add_command(cli_logs.instances_logs)

