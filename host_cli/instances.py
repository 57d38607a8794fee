"""The ``takohost instances …`` commands and the ``takohost status`` alias (docs/spec/architecture.md#ar-operating): create,
list, inspect, follow, signal, terminate and read the history of workflow instances over HTTP.

Commands: ``instances create|list|status|send-event|terminate|history``; ``status`` (alias of
``instances status``, for ``takohost status WF ID --watch``, which exits 1 when the instance ends
``errored`` or ``terminated``). WORKFLOW is a DurableWorkflow name or UID; ``instances list``
without one lists every DurableWorkflow's instances (each row names its workflow). Options, output and errors follow ``host_cli.common``; ``host_cli.client_commands`` registers
the commands on the ``takohost`` group.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from host_cli import client as http
from host_cli import common
from host_cli import logs as cli_logs
from host_cli.errors import CommandFailed
from takohost.domain import deepjson, divergence, jsonstrict

__all__ = ["instances", "status_alias"]

#: Terminal statuses after which ``status --watch`` exits 1.
_FAILED_ENDS = frozenset({"errored", "terminated"})

_STATUS_STYLE = {
    "complete": "green",
    "errored": "red",
    "terminated": "magenta",
    "waiting": "yellow",
    "sleeping": "cyan",
    "running": "blue",
    "queued": "white",
}


def _parse_document_option(raw: str | None, *, option: str) -> dict[str, Any] | None:
    """``--params``/``--payload`` text → a JSON object (strict JSON, docs/spec/http-api.md API-json)."""
    if raw is None:
        return None
    try:
        value = jsonstrict.loads_strict(raw.encode("utf-8", "surrogatepass"))
    except (jsonstrict.StrictJSONError, ValueError, RecursionError) as exc:
        raise CommandFailed("invalid_json", f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CommandFailed(
            "invalid_params", f'{option} must be a JSON object, e.g. \'{{"orderId": "A-1"}}\''
        )
    return value


def _status_text(status: str) -> str:
    """``status`` as ``rich`` markup in its colour (white when unknown)."""
    style = _STATUS_STYLE.get(status, "white")
    return f"[{style}]{escape(status)}[/{style}]"


def status_detail(status: str, events: list[dict[str, Any]]) -> str | None:
    """One line saying where an instance stands, from its history (oldest first), or ``None``.

    ``waiting`` → ``waiting for event 'shipped' (step 'wait for shipment', until <timeoutAt>)``;
    ``sleeping`` → ``sleeping in step 'cool off' until <wakeAt>``; ``running`` during a retry
    delay → ``step 'charge card' attempt 2 failed (…); retry at <retryAt>``. The last step that
    completed is appended (``; last completed step: 'charge card'``).
    """
    completed = [e for e in events if e.get("eventType") == "StepCompleted"]
    last = (completed[-1].get("attributes") or {}).get("name") if completed else None
    tail = f"; last completed step: {last!r}" if last else ""
    latest = events[-1] if events else {}
    attributes = latest.get("attributes") or {}
    if status == "waiting":
        wait = next((e for e in reversed(events) if e.get("eventType") == "WaitStarted"), None)
        if wait is not None:
            a = wait.get("attributes") or {}
            return f"waiting for event {a.get('type')!r} (step {a.get('name')!r}, until {a.get('timeoutAt')}){tail}"
    if status == "sleeping":
        sleep = next((e for e in reversed(events) if e.get("eventType") == "SleepScheduled"), None)
        if sleep is not None:
            a = sleep.get("attributes") or {}
            return f"sleeping in step {a.get('name')!r} until {a.get('wakeAt')}{tail}"
    if status == "running" and latest.get("eventType") == "StepAttemptFailed" and "retryAt" in attributes:
        error = attributes.get("error") or {}
        return (
            f"step {attributes.get('name')!r} attempt {attributes.get('attempt')} failed "
            f"({error.get('type')}: {error.get('message')}); retry at {attributes['retryAt']}{tail}"
        )
    if status == "queued":
        return "queued: no replay context has started yet"
    return tail[2:] or None


def progress_detail(progress: dict[str, Any]) -> str | None:
    """One line from ``GET …/progress`` (docs/operations.md "Where is it?"), or ``None`` for a
    finished instance: ``retrying step 'charge' (attempt 2 at <retryAt>; attempt 1 failed:
    ZeroDivisionError: division by zero)``, ``waiting for event 'approved' (step 'approval', until
    <timeoutAt>)``, ``sleeping in step 'nap' until <wakeAt>``, ``queued: no Version to run it (…)``…"""
    activity = progress.get("activity")
    step = progress.get("step") or {}
    name = step.get("name")
    if activity == "retrying":
        error = progress.get("lastError") or {}
        last = step.get("attempt", 2) - 1
        failed = f"; attempt {last} failed: {error.get('type')}: {error.get('message')}" if error else ""
        return f"retrying step {name!r} (attempt {step.get('attempt')} at {progress.get('retryAt')}{failed})"
    if activity == "sleeping":
        return f"sleeping in step {name!r} until {progress.get('wakeAt')}"
    if activity == "waiting":
        return (f"waiting for event {progress.get('eventType')!r} (step {name!r}, "
                f"until {progress.get('timeoutAt')})")
    if activity == "stopping":
        return f"being stopped ({progress.get('reason')})"
    if activity == "finished" or activity is None:
        return None
    text = {"queued": "queued: no replay context has started yet",
            "starting": "starting: a replay context is due",
            "running": "running"}.get(activity, activity)
    if activity == "running" and name:
        since = f" since {progress['since']}" if progress.get("since") else ""
        text = f"running step {name!r} attempt {step.get('attempt')}{since}"
    elif activity == "running" and progress.get("context"):
        context = progress["context"]
        text = f"running (context epoch {context.get('epoch')} since {context.get('startedAt')})"
    if progress.get("reason") == "no_version":
        text += f"; no Version to run it: {progress.get('message')}"
    return text


def _print_instance(
    console: Console, answer: dict[str, Any], detail: str | None = None, *, diverged: str | None = None
) -> None:
    """Print an instance answer (``{"id", "status", "output"?, "error"?}``) as a two-column table,
    with ``detail`` (:func:`status_detail`) under the status and ``diverged`` (the replay
    divergence of its history, ``takohost.domain.divergence``) flagged in yellow."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("id", escape(common.visible(answer.get("id", ""))))
    table.add_row("status", _status_text(answer.get("status", "?")))
    if detail:
        table.add_row("detail", escape(common.visible(detail)))
    if diverged:
        table.add_row("warning", f"[yellow]{escape(common.visible(diverged))}[/yellow]")
    if "output" in answer:
        table.add_row("output", escape(common.visible(common.compact(answer["output"]))))
    if "error" in answer:
        error = answer["error"] or {}
        text = error.get("reason", "?") + (f": {error['message']}" if error.get("message") else "")
        table.add_row("error", f"[red]{escape(common.visible(text))}[/red]")
    console.print(table)


# --- instances ------------------------------------------------------------------------------


@click.group("instances")
def instances() -> None:
    """Create, inspect and drive workflow instances (WORKFLOW is a DurableWorkflow name or UID)."""


@instances.command("create")
@click.argument("workflow")
@click.option(
    "--id",
    "instance_id",
    default=None,
    help="Instance id (1-256 characters); the host issues one if omitted.",
)
@click.option("--params", default=None, help="Params, a JSON object.")
@common.json_client_command
def instances_create(
    api: http.Client, *, workflow: str, instance_id: str | None, params: str | None, as_json: bool
) -> None:
    """Create an instance of WORKFLOW (prints its id)."""
    document = _parse_document_option(params, option="--params")
    uid, name = common.resolve_named(api, workflow, form="DurableWorkflow")
    answer = api.create_instance(uid, instance_id=instance_id, params=document)
    if as_json:
        common.emit_json(answer)
    else:
        console = common.stdout_console()
        console.print(f"created instance [bold]{escape(answer['id'])}[/bold]")
        console.print(f"console: {escape(common.console_url(api, workflow=name, instance_id=answer['id']))}",
                      soft_wrap=True)


@instances.command("list")
@click.argument("workflow", required=False)
@click.option(
    "--status",
    default=None,
    type=click.Choice(["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]),
    help="Only instances with this status.",
)
@common.json_client_command
def instances_list(api: http.Client, *, workflow: str | None, status: str | None, as_json: bool) -> None:
    """List the instances of WORKFLOW, or of every DurableWorkflow of the Space when none is named."""
    if workflow is not None:
        targets = [(workflow, common.resolve(api, workflow, form="DurableWorkflow"))]
    else:
        targets = [
            (r["name"], r["uid"]) for r in api.iter_resources(form=http.FORM_URLS["DurableWorkflow"])
        ]
    rows = [
        {"workflow": name, **row}
        for name, uid in targets
        for row in api.iter_instances(uid, status=status)
    ]
    if as_json:
        common.emit_json({"instances": rows})
        return
    table = Table("WORKFLOW", "ID", "STATUS", "CREATED")
    for row in rows:
        table.add_row(
            escape(row["workflow"]),
            escape(row.get("id", "")),
            _status_text(row.get("status", "?")),
            row.get("createdAt", ""),
        )
    console = common.stdout_console()
    console.print(table)
    console.print(f"{len(rows)} instance(s)")


def _status(
    api: http.Client,
    *,
    workflow: str,
    instance_id: str,
    watch: bool,
    interval: float,
    timeout: float | None,
    as_json: bool,
) -> None:
    workflow_uid, workflow_name = common.resolve_named(api, workflow, form="DurableWorkflow")
    answer = api.get_instance(workflow_uid, instance_id)
    if watch:
        answer = _watch(
            api,
            workflow_uid=workflow_uid,
            instance_id=instance_id,
            first=answer,
            interval=interval,
            timeout=timeout,
            quiet=as_json,
        )
    if as_json:
        common.emit_json(answer)
    else:
        events = list(api.iter_history(workflow_uid, instance_id))
        detail = status_detail(answer.get("status", ""), events)
        if answer.get("status") in ("queued", "running", "sleeping", "waiting"):
            # what it runs or waits for, from the server's view (…/progress), then the last step
            where = progress_detail(api.get_progress(workflow_uid, instance_id))
            done = [e for e in events if e.get("eventType") == "StepCompleted"]
            last = (done[-1].get("attributes") or {}).get("name") if done else None
            if where:
                detail = where + (f"; last completed step: {last!r}" if last else "")
        console = common.stdout_console()
        _print_instance(console, answer, detail, diverged=divergence.divergence_text(events))
        console.print(f"console: {escape(common.console_url(api, workflow=workflow_name, instance_id=instance_id))}",
                      soft_wrap=True)
        cli_logs.print_failure(answer, events)
    if watch and answer.get("status") in _FAILED_ENDS:
        # --watch is for scripts too: an instance that ended badly is a failure (exit 1).
        click.echo(f"error: {answer['status']}: instance {instance_id!r} ended {answer['status']}", err=True)
        raise SystemExit(1)


def _watch(
    api: http.Client,
    *,
    workflow_uid: str,
    instance_id: str,
    first: dict[str, Any],
    interval: float,
    timeout: float | None,
    quiet: bool,
) -> dict[str, Any]:
    """Poll until the instance is terminal (complete, errored, terminated); show each change."""
    deadline = None if timeout is None else time.monotonic() + timeout
    answer, last = first, None
    while True:
        if answer.get("status") != last and not quiet:
            stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S")
            common.stderr.print(f"{stamp}  {_status_text(answer.get('status', '?'))}")
        last = answer.get("status")
        if last in http.TERMINAL_STATUSES:
            return answer
        if deadline is not None and time.monotonic() >= deadline:
            raise CommandFailed("timeout", f"instance {instance_id!r} is still {last} after {timeout:g} s")
        time.sleep(interval)
        answer = api.get_instance(workflow_uid, instance_id)


_STATUS_OPTIONS = [
    click.argument("workflow"),
    click.argument("instance_id", metavar="ID"),
    click.option(
        "--watch",
        is_flag=True,
        help="Follow the instance until it is complete (exit 0), errored or terminated (exit 1).",
    ),
    click.option(
        "--interval",
        default=1.0,
        show_default=True,
        type=click.FloatRange(min=0.05),
        help="Seconds between polls with --watch.",
    ),
    click.option(
        "--timeout",
        default=None,
        type=click.FloatRange(min=0),
        help="With --watch: give up (exit 1) after this many seconds.",
    ),
]


def _with_status_options(fn: Callable[..., None]) -> Callable[..., None]:
    for decorate in reversed(_STATUS_OPTIONS):
        fn = decorate(fn)
    return fn


@instances.command("status")
@_with_status_options
@common.json_client_command
def instances_status(api: http.Client, **options: Any) -> None:
    """Show the status of instance ID of WORKFLOW (--watch follows it until terminal)."""
    _status(api, **options)


@click.command("status")
@_with_status_options
@common.json_client_command
def status_alias(api: http.Client, **options: Any) -> None:
    """Show an instance's status (--watch: follow it until terminal); same as `instances status`."""
    _status(api, **options)


@instances.command("send-event")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@click.argument("event_type", metavar="TYPE")
@click.option("--payload", default=None, help="Event payload, a JSON object.")
@click.option(
    "--idempotency-key",
    default=None,
    help="Idempotency-Key for the call (default: a new random one; retries reuse it).",
)
@common.json_client_command
def instances_send_event(
    api: http.Client,
    *,
    workflow: str,
    instance_id: str,
    event_type: str,
    payload: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Send an event of TYPE to instance ID (queued until a matching wait consumes it)."""
    document = _parse_document_option(payload, option="--payload")
    api.send_event(
        common.resolve(api, workflow, form="DurableWorkflow"),
        instance_id,
        event_type=event_type,
        payload=document,
        idempotency_key=idempotency_key or f"tkcli-{uuid.uuid4()}",
    )
    if as_json:
        common.emit_json({"accepted": True, "id": instance_id, "type": event_type})
    else:
        common.stdout_console().print(f"event [bold]{escape(event_type)}[/bold] accepted for {escape(instance_id)}")


@instances.command("terminate")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@common.json_client_command
def instances_terminate(api: http.Client, *, workflow: str, instance_id: str, as_json: bool) -> None:
    """Terminate instance ID (returns once the host proved its code stopped)."""
    answer = api.terminate_instance(common.resolve(api, workflow, form="DurableWorkflow"), instance_id)
    if as_json:
        common.emit_json({"id": instance_id, **answer})
    else:
        common.stdout_console().print(f"{escape(instance_id)}: {_status_text(answer.get('status', '?'))}")


@instances.command("history")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@click.option(
    "--export",
    "export_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write a replayable history file (takohost.testing.replay; docs/testing.md) to this path.",
)
@common.json_client_command
def instances_history(
    api: http.Client, *, workflow: str, instance_id: str, as_json: bool, export_path: str | None
) -> None:
    """Show the instance's event history (the audit trail of every state change), oldest first;
    with ``--export FILE``, write it as a replayable history file instead."""
    workflow_uid = common.resolve(api, workflow, form="DurableWorkflow")
    if export_path is not None:
        exported = recorded_history(api, workflow_uid, instance_id, workflow=workflow)
        pathlib.Path(export_path).write_text(deepjson.dumps(exported.to_json()) + "\n", encoding="utf-8")
        count, status = len(exported.events), (exported.status or {}).get("status")
        if as_json:
            common.emit_json({"exported": export_path, "events": count, "status": status})
        else:
            Console().print(f"{count} event(s) of {escape(instance_id)} written to {escape(export_path)}")
        return
    events = list(api.iter_history(workflow_uid, instance_id))
    if as_json:
        common.emit_json({"events": events})
        return
    table = Table("#", "TIME", "EVENT", "ATTRIBUTES")
    for event in events:
        attributes = event.get("attributes") or {}
        table.add_row(
            str(event.get("eventId", "")),
            str(event.get("eventTimestamp", "")),
            escape(str(event.get("eventType", ""))),
            escape(common.visible(common.compact(cli_logs.without_traceback(attributes)))) if attributes else "",
        )
    common.stdout_console().print(table)
    cli_logs.print_tracebacks(events)


def recorded_history(api: http.Client, workflow_uid: str, instance_id: str, *, workflow: str) -> Any:
    """The instance's history and final fields as a ``takohost.testing.HistoryFile`` (what
    ``instances history --export`` writes and ``versions check DIR`` replays): every event, oldest
    first, and ``{"status", "output"?, "error"?}`` of its status. Raises ``http.ClientError``."""
    from takohost import testing  # here: the test kit costs every other command 0.1 s to import

    events = list(api.iter_history(workflow_uid, instance_id))
    status = api.get_instance(workflow_uid, instance_id)
    return testing.HistoryFile(
        events=events,
        instance_id=instance_id,
        workflow=workflow,
        status={k: v for k, v in status.items() if k in ("status", "output", "error")},
    )
