"""Tenant logs and failure tracebacks on the command line (docs/spec/host-features.md#hf-observability).

Commands: ``takohost instances logs WORKFLOW ID [--follow]`` (registered on the ``instances``
group by ``host_cli.client_commands``) and ``takohost run-logs TRIGGER SCHEDULED_TIME
[--follow]``. Each line prints as ``TIME  STEP#ATTEMPT  STREAM  MESSAGE`` (``-`` outside a
step); the lines are the tenant's, so control characters are shown escaped (``\\x1b``) and rich
markup is never interpreted: a log line cannot repaint the terminal. ``--json`` prints the lines
as one JSON document (without ``--follow``).

:func:`print_failure` and :func:`print_tracebacks` show the tenant's traceback of an errored
instance (``instances status``) and of failed attempts (``instances history``) from the history's
``traceback`` attributes.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from host_cli import client as http
from host_cli import common
from takohost.runtime import tracebacks

__all__ = [
    "failure_frames",
    "LogSource",
    "instances_logs",
    "log_command",
    "print_failure",
    "print_tracebacks",
    "render_line",
    "run_logs",
    "without_traceback",
]

_STREAM_STYLE = {"stderr": "yellow", "host": "cyan"}
_visible = common.visible


#: Starts every continuation line of a multi-line message (a host line quoting a tenant's
#: exception message): only a line's first row starts with its time, so text a tenant wrote
#: cannot pass for a line of its own (a forged ``host`` line, a fake "lines dropped" marker).
CONTINUATION = "    │ "


def render_line(line: dict[str, Any]) -> str:
    """One log line as rich markup-safe text (``TIME  STEP#ATTEMPT  STREAM  MESSAGE``); each
    further row of a multi-line message starts with :data:`CONTINUATION`."""
    where = "-"
    if line.get("step") is not None:
        where = f"{line['step']}#{line.get('attempt') or '-'}"
    elif line.get("delivery") is not None:
        where = f"delivery {line['delivery']}"
    stream = str(line.get("stream", ""))
    style = _STREAM_STYLE.get(stream)
    head = f"{line.get('time', '')}  {escape(_visible(where))}  "
    label = f"[{style}]{stream:<6}[/{style}]" if style else f"{stream:<6}"
    message = escape(_visible(str(line.get("message", ""))))
    return head + label + "  " + message.replace("\n", "\n" + CONTINUATION)


def _follow(
    fetch: Callable[[str | None], dict[str, Any]],
    *,
    follow: bool,
    interval: float,
    as_json: bool,
    done: Callable[[], bool] | None = None,
    replayed: bool = True,
) -> None:
    """Print (or collect as JSON) every page of lines; ``replayed`` ``False`` leaves out the
    lines printed while a context replayed recorded steps (counted in a note at the end)."""
    console = common.stdout_console(highlight=False, soft_wrap=True)
    token: str | None = None
    collected: list[dict[str, Any]] = []
    first = True
    hidden = 0

    def kept(page: dict[str, Any]) -> list[dict[str, Any]]:
        nonlocal hidden
        lines = page.get("logs") or []
        if replayed:
            return lines
        shown = [line for line in lines if not line.get("replayed")]
        hidden += len(lines) - len(shown)
        return shown

    while True:
        page = fetch(token)
        raw = page.get("logs") or []
        lines = kept(page)
        if first and page.get("removedLines"):
            note = f"… {page['removedLines']} older line(s) were removed (the per-instance cap)"
            if not as_json:
                console.print(f"[dim]{escape(note)}[/dim]")
        first = False
        if as_json:
            collected.extend(lines)
        else:
            for line in lines:
                console.print(render_line(line))
        token = page.get("nextPageToken") or token
        if raw:
            continue  # more may be there: read on until a page comes back empty
        if not follow:
            break
        if done is not None and done():
            # One last read: lines written just before the end.
            page = fetch(token)
            for line in kept(page):
                console.print(render_line(line))
            break
        time.sleep(interval)
    if as_json:
        common.emit_json({"logs": collected})
    elif hidden:
        common.stderr.print(f"[dim]{hidden} line(s) printed again while replaying recorded steps are hidden "
                            "(--replayed shows them)[/dim]")


@dataclasses.dataclass(frozen=True)
class LogSource:
    """What a log command prints: ``fetch(page_token)`` reads one page of the API's log answer
    (``{"logs", "nextPageToken", "removedLines"}``); ``done()`` is true once nothing more will be
    written (polled by ``--follow``); ``replayed`` ``False`` hides the lines printed again while a
    context replayed recorded steps."""

    fetch: Callable[[str | None], dict[str, Any]]
    done: Callable[[], bool]
    replayed: bool = True


def log_command(fn: Callable[..., LogSource]) -> Callable[..., None]:
    """A client command that prints log lines: ``fn(api, as_json=…, **arguments)`` resolves its
    arguments to a :class:`LogSource`; this adds ``--follow``, ``--interval`` (seconds) and
    ``--json`` (which do not go together) and prints the source's pages."""

    @functools.wraps(fn)
    def command(api: http.Client, *, follow: bool, interval: float, as_json: bool, **arguments: Any) -> None:
        if follow and as_json:
            raise click.UsageError("--follow and --json do not go together")
        source = fn(api, as_json=as_json, **arguments)
        _follow(
            source.fetch, follow=follow, interval=interval, as_json=as_json, done=source.done, replayed=source.replayed
        )

    follow_option = click.option(
        "--follow", "-f", is_flag=True, help="Keep printing new lines until the instance is terminal (the run finished)."
    )
    interval_option = click.option(
        "--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05), help="Seconds between polls."
    )
    return follow_option(interval_option(common.json_client_command(command)))


@click.command("logs")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@click.option(
    "--replayed",
    is_flag=True,
    help="Also show the lines code printed again while a later context replayed the recorded steps.",
)
@log_command
def instances_logs(api: http.Client, *, workflow: str, instance_id: str, replayed: bool, as_json: bool) -> LogSource:
    """Print the log lines of instance ID of WORKFLOW (print, stderr, logging), oldest first.

    Code outside steps runs again in every context that replays the instance: the lines it
    printed again then are hidden unless --replayed (--json keeps every line, each with its
    "replayed" flag)."""
    workflow_uid = common.resolve(api, workflow, form="DurableWorkflow")

    def done() -> bool:
        return api.get_instance(workflow_uid, instance_id).get("status") in http.TERMINAL_STATUSES

    return LogSource(
        lambda token: api.get_logs(workflow_uid, instance_id, page_token=token),
        done,
        replayed=replayed or as_json,
    )


@click.command("run-logs")
@click.argument("trigger")
@click.argument("scheduled_time", metavar="SCHEDULED_TIME")
@log_command
def run_logs(api: http.Client, *, trigger: str, scheduled_time: str, as_json: bool) -> LogSource:
    """Print the log lines of the run of cron TRIGGER at SCHEDULED_TIME (as `takohost runs` shows it)."""
    trigger_uid = common.resolve(api, trigger, form="WorkerCronTrigger")

    def done() -> bool:
        """The run's last delivery finished (ok or failed): nothing more will be written."""
        page = api.list_runs(trigger_uid)
        for run in page.get("runs") or []:
            if run.get("scheduledTime") == scheduled_time:
                deliveries = run.get("deliveries") or []
                return bool(deliveries) and deliveries[-1].get("outcome") in ("ok", "failed")
        return True  # older than the ledger's first page: long finished

    return LogSource(lambda token: api.get_run_logs(trigger_uid, scheduled_time, page_token=token), done)


# --- tracebacks from the history ----------------------------------------------------------


def failure_frames(events: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]] | None:
    """``(headline, frames)`` of why an errored instance failed, from its history (oldest first):
    the ``InstanceErrored`` traceback of a ``run_threw``, else the last failed attempt's."""
    for event in reversed(events):
        attributes = event.get("attributes") or {}
        if event.get("eventType") == "InstanceErrored" and attributes.get("traceback"):
            return str(attributes.get("message", "")), attributes["traceback"]
        if event.get("eventType") == "StepAttemptFailed":
            error = attributes.get("error") or {}
            if error.get("traceback"):
                headline = (
                    f"step {attributes.get('name')!r} attempt {attributes.get('attempt')}: "
                    f"{error.get('type')}: {error.get('message')}"
                )
                return headline, error["traceback"]
    return None


def without_traceback(attributes: dict[str, Any]) -> dict[str, Any]:
    """History attributes without their ``traceback`` (printed under the table instead)."""
    out = {k: v for k, v in attributes.items() if k != "traceback"}
    if isinstance(out.get("error"), dict) and "traceback" in out["error"]:
        out["error"] = {k: v for k, v in out["error"].items() if k != "traceback"}
    return out


def _print_frames(console: Console, headline: str, frames: list[dict[str, Any]]) -> None:
    console.print(f"[red]{escape(_visible(headline))}[/red]")
    console.print("Traceback (the Version's frames, innermost last):")
    console.print(escape(_visible(tracebacks.format_frames(frames))))


def print_failure(answer: dict[str, Any], events: list[dict[str, Any]], *, console: Console | None = None) -> None:
    """Under an errored instance's status: the traceback of its failure, when the history has one."""
    if answer.get("status") != "errored":
        return
    found = failure_frames(events)
    if found is not None:
        _print_frames(console or common.stdout_console(highlight=False), *found)


def print_tracebacks(events: list[dict[str, Any]], *, console: Console | None = None) -> None:
    """After a history table: each failed attempt's and run's traceback, by event id."""
    console = console or common.stdout_console(highlight=False)
    for event in events:
        attributes = event.get("attributes") or {}
        frames = attributes.get("traceback") or (attributes.get("error") or {}).get("traceback")
        if not frames:
            continue
        error = attributes.get("error") or {}
        headline = f"#{event.get('eventId')} {event.get('eventType')}: " + (
            f"{error.get('type')}: {error.get('message')}" if error else str(attributes.get("message", ""))
        )
        _print_frames(console, headline, frames)
