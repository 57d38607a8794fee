"""The ``takohost workflows|triggers|resources …`` commands (docs/spec/host-features.md#hf-newcomer): list, show and
delete the resources of a Space by name (or UID) over HTTP.

Commands: ``workflows list``; ``triggers list``, ``triggers delete TRIGGER``; ``resources list
[--form FORM]``, ``resources get NAME``, ``resources delete NAME``. ``FORM`` is a short Form name
(``ModuleWorker``, ``WorkerVersion``, ``WorkerDeployment``, ``DurableWorkflow``,
``WorkerCronTrigger``). A delete waits for its Operation (``--timeout``) and fails with the
Operation's error code. Options, output and errors follow ``host_cli.common``;
``host_cli.client_commands`` registers the groups on the ``takohost`` group.
"""

from __future__ import annotations

import uuid
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from host_cli import client as http
from host_cli import common
from host_cli.errors import CommandFailed

__all__ = ["resources", "triggers", "workflows"]

_FORM_CHOICE = click.Choice(sorted(http.FORM_URLS))
_TIMEOUT = click.option(
    "--timeout", default=300.0, show_default=True, type=click.FloatRange(min=1),
    help="Seconds to wait for the delete Operation.",
)


def short_form(resource: dict[str, Any]) -> str:
    """The short Form name of a Resource whose ``form`` is a Form URL (or already short)."""
    form = resource.get("form", "")
    return next((short for short, url in http.FORM_URLS.items() if form in (short, url)), form)


def _find(api: http.Client, ref: str, *, form: str | None) -> dict[str, Any]:
    """The live Resource named ``ref`` (or with UID ``ref``), of short Form ``form`` when given."""
    if form is not None:
        return api.get_resource(common.resolve(api, ref, form=form))
    everything = list(api.iter_resources())
    for resource in everything:
        if ref in (resource.get("name"), resource.get("uid")):
            return resource
    raise CommandFailed(
        "not_found",
        f"no resource named {ref!r} in Space {api.space!r}",
        f"names known: {', '.join(sorted(r['name'] for r in everything)) or '(none)'}",
    )


def _delete(api: http.Client, resource: dict[str, Any], *, timeout: float, as_json: bool) -> None:
    """DELETE ``resource`` and wait for its Operation; print ✓ or fail with the Operation's error."""
    label = f"{short_form(resource)} {resource['name']} ({resource['uid']})"
    try:
        operation = api.delete_resource(resource["uid"], idempotency_key=f"tkcli-{uuid.uuid4()}")
    except http.ClientError as exc:  # refused before any side effect: say which resource
        raise CommandFailed(exc.code, f"delete {label}: {exc.message}") from None
    with common.stderr.status(f"delete {escape(label)} (Operation {escape(operation['id'])})"):
        operation = api.wait_operation(operation["id"], timeout=timeout)
    if operation.get("state") == "failed":
        error = operation.get("error") or {}
        raise CommandFailed(
            str(error.get("code") or "operation_failed"),
            f"delete {label}: {error.get('message') or 'the Operation failed without a message'}",
            f"Operation {operation.get('id')}, effect {operation.get('effect', 'unknown')}",
        )
    if as_json:
        common.emit_json(operation)
    else:
        common.stderr.print(f"[green]✓[/green] deleted {escape(label)}")


# --- workflows ------------------------------------------------------------------------------


@click.group("workflows")
def workflows() -> None:
    """List the DurableWorkflows of the Space."""


@workflows.command("list")
@common.json_client_command
def workflows_list(api: http.Client, *, as_json: bool) -> None:
    """List the DurableWorkflows: name, UID, class, whether new instances are accepted (ready)
    and the instance counts (as last observed)."""
    rows = list(api.iter_resources(form=http.FORM_URLS["DurableWorkflow"]))
    if as_json:
        common.emit_json({"workflows": rows})
        return
    table = Table("NAME", "UID", "CLASS", "READY", "INSTANCES", "PHASE")
    for row in rows:
        observed = row.get("observed") or {}
        counts = observed.get("instanceCounts") or {}
        ready = observed.get("ready")
        table.add_row(
            escape(row["name"]), row["uid"], escape(str((row.get("spec") or {}).get("className", ""))),
            "?" if ready is None else ("yes" if ready else "[red]no[/red]"),
            escape(", ".join(f"{k} {v}" for k, v in counts.items() if v)) or "-",
            escape(str(row.get("phase", ""))),
        )
    console = common.stdout_console()
    console.print(table)
    console.print(f"{len(rows)} workflow(s)")


# --- triggers -------------------------------------------------------------------------------


@click.group("triggers")
def triggers() -> None:
    """List and delete the WorkerCronTriggers of the Space (`takohost runs TRIGGER`: its matches)."""


@triggers.command("list")
@common.json_client_command
def triggers_list(api: http.Client, *, as_json: bool) -> None:
    """List the cron triggers: name, UID, cron, next match (UTC, as last observed), phase."""
    rows = list(api.iter_resources(form=http.FORM_URLS["WorkerCronTrigger"]))
    if as_json:
        common.emit_json({"triggers": rows})
        return
    table = Table("NAME", "UID", "CRON", "NEXT MATCH", "PHASE")
    for row in rows:
        observed = row.get("observed") or {}
        table.add_row(
            escape(row["name"]), row["uid"], escape(str((row.get("spec") or {}).get("cron", ""))),
            escape(str(observed.get("nextMatchAt", "-"))), escape(str(row.get("phase", ""))),
        )
    console = common.stdout_console()
    console.print(table)
    console.print(f"{len(rows)} trigger(s)")


@triggers.command("delete")
@click.argument("trigger")
@_TIMEOUT
@common.json_client_command
def triggers_delete(api: http.Client, *, trigger: str, timeout: float, as_json: bool) -> None:
    """Delete cron TRIGGER (name or UID): no match is recorded after it; running handlers are stopped."""
    _delete(api, _find(api, trigger, form="WorkerCronTrigger"), timeout=timeout, as_json=as_json)


# --- resources ------------------------------------------------------------------------------


@click.group("resources")
def resources() -> None:
    """List, show and delete any resource of the Space (by name or UID)."""


@resources.command("list")
@click.option("--form", "form", type=_FORM_CHOICE, default=None, help="Only resources of this Form.")
@common.json_client_command
def resources_list(api: http.Client, *, form: str | None, as_json: bool) -> None:
    """List the live resources (oldest first): Form, name, UID, phase, generation."""
    rows = list(api.iter_resources(form=None if form is None else http.FORM_URLS[form]))
    if as_json:
        common.emit_json({"resources": rows})
        return
    table = Table("FORM", "NAME", "UID", "PHASE", "GEN")
    for row in rows:
        table.add_row(
            short_form(row), escape(row["name"]), row["uid"], escape(str(row.get("phase", ""))),
            str(row.get("generation", "")),
        )
    console = common.stdout_console()
    console.print(table)
    console.print(f"{len(rows)} resource(s)")


@resources.command("get")
@click.argument("name")
@click.option("--form", "form", type=_FORM_CHOICE, default=None, help="The resource's Form.")
@common.client_command
def resources_get(api: http.Client, *, name: str, form: str | None) -> None:
    """Print resource NAME (or UID) as JSON: spec, observed, phase, latest Operation."""
    common.emit_json(_find(api, name, form=form))


@resources.command("delete")
@click.argument("name")
@click.option("--form", "form", type=_FORM_CHOICE, default=None, help="The resource's Form.")
@_TIMEOUT
@common.json_client_command
def resources_delete(api: http.Client, *, name: str, form: str | None, timeout: float, as_json: bool) -> None:
    """Delete resource NAME (or UID) and wait for its Operation (a DurableWorkflow takes its
    instances with it; a resource still referred to is refused with dependency_conflict)."""
    _delete(api, _find(api, name, form=form), timeout=timeout, as_json=as_json)
