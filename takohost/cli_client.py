"""The client half of the ``takohost`` command (issue 6 item 3; CONTRACT §9): talk to a running
host over HTTP (CONTRACT §2) with ``--url``/``TAKOHOST_URL``, ``--token``/``TAKOHOST_TOKEN`` and
``--space``/``TAKOHOST_SPACE``.

Commands: ``deploy DIR``; ``instances create|list|status|send-event|terminate|history``;
``status`` (alias of ``instances status``, for ``takohost status WF ID --watch``); ``runs TRIGGER``.
Tables are drawn with ``rich`` on stdout; ``--json`` prints one stable JSON document instead
(sorted keys, ASCII, 2-space indent). Progress goes to stderr.

Errors print ``error: <code>: <message>`` on stderr and exit 1 — API errors with the API's code
(CONTRACT §2.4), failed Operations with the Operation's code, a host that does not answer as
``unreachable`` ("cannot reach the host at URL") — never a traceback. Usage errors are click's
(exit 2); Ctrl-C exits 130.

Registration: ``takohost/cli.py`` imports this module at its end; the commands are added to the
``main`` group of every loaded copy of ``takohost.cli`` (the package module, and ``__main__`` under
``python -m takohost.cli``), see :func:`register`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from takohost import cli as _cli  # noqa: F401 - loads the group we register on (see register())
from takohost import client as http
from takohost import manifest as manifests
from takohost.domain import jsonstrict

__all__ = ["DEFAULT_SPACE", "DEFAULT_URL", "CommandFailed", "Deployer", "register"]

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_SPACE = "dev"
_FORM = http.FORM_URLS
_STATUS_STYLE = {
    "complete": "green",
    "errored": "red",
    "terminated": "magenta",
    "waiting": "yellow",
    "sleeping": "cyan",
    "running": "blue",
    "queued": "white",
}

stderr = Console(stderr=True, highlight=False)


class CommandFailed(Exception):
    """A command cannot go on: printed as ``error: <code>: <message>`` plus ``hints`` lines."""

    def __init__(self, code: str, message: str, *hints: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.hints = hints


# --- shared plumbing ------------------------------------------------------------------------


@contextlib.contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn every failure into ``error: code: message`` on stderr and an exit status."""
    try:
        yield
    except http.ClientError as exc:
        _fail(exc.code, exc.message, *_detail_hints(exc.details, exc.message))
    except manifests.ManifestError as exc:
        _fail("invalid_manifest", str(exc))
    except CommandFailed as exc:
        _fail(exc.code, exc.message, *exc.hints)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # never a traceback (issue 6 item 3)
        _fail("internal_error", f"{type(exc).__name__}: {exc}")


def _fail(code: str, message: str, *hints: str) -> None:
    click.echo(f"error: {code}: {message}", err=True)
    for hint in hints:
        click.echo(f"  {hint}", err=True)
    sys.exit(1)


def _detail_hints(details: dict[str, Any], message: str) -> list[str]:
    pointer = details.get("pointer")
    return [f"at {pointer}"] if isinstance(pointer, str) and pointer and pointer not in message else []


def _client_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Add ``--url``, ``--token``, ``--space``; call ``fn(api, **options)`` inside error reporting."""

    @click.option(
        "--url",
        envvar="TAKOHOST_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Base URL of the host API (env TAKOHOST_URL).",
    )
    @click.option(
        "--token",
        envvar="TAKOHOST_TOKEN",
        default=None,
        help="Bearer token (env TAKOHOST_TOKEN; `takohost token create --space S` prints one).",
    )
    @click.option(
        "--space",
        envvar="TAKOHOST_SPACE",
        default=DEFAULT_SPACE,
        show_default=True,
        help="Space the token grants (env TAKOHOST_SPACE).",
    )
    @functools.wraps(fn)
    def wrapper(*, url: str, token: str | None, space: str, **options: Any) -> None:
        with _reported_errors():
            if not token:
                raise CommandFailed(
                    "unauthenticated",
                    "no token: pass --token or set TAKOHOST_TOKEN",
                    "`takohost dev` prints one; or `takohost token create --space SPACE`",
                )
            fn(http.Client(base_url=url, token=token, space=space), **options)

    return wrapper


def _json_option(fn: Callable[..., None]) -> Callable[..., None]:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(fn)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, sort_keys=True, indent=2, ensure_ascii=True))


def _parse_document_option(raw: str | None, *, option: str) -> dict[str, Any] | None:
    """``--params``/``--payload`` text → a JSON object (strict JSON, CONTRACT §2 API-json)."""
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


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def _resolve(api: http.Client, ref: str, *, form: str) -> str:
    """A resource of ``form`` named ``ref`` (or with UID ``ref``) → its UID; ``not_found`` otherwise."""
    resources = list(api.iter_resources(form=_FORM[form]))
    for resource in resources:
        if resource.get("name") == ref:
            return resource["uid"]
    for resource in resources:
        if resource.get("uid") == ref:
            return ref
    raise CommandFailed(
        "not_found",
        f"no {form} named {ref!r} in Space {api.space!r}",
        f"names known: {', '.join(sorted(r['name'] for r in resources)) or '(none)'}",
    )


def _status_text(status: str) -> str:
    style = _STATUS_STYLE.get(status, "white")
    return f"[{style}]{escape(status)}[/{style}]"


def _print_instance(console: Console, answer: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("id", escape(answer.get("id", "")))
    table.add_row("status", _status_text(answer.get("status", "?")))
    if "output" in answer:
        table.add_row("output", escape(_compact(answer["output"])))
    if "error" in answer:
        error = answer["error"] or {}
        text = error.get("reason", "?") + (f": {error['message']}" if error.get("message") else "")
        table.add_row("error", f"[red]{escape(text)}[/red]")
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
@_json_option
@_client_command
def instances_create(
    api: http.Client, *, workflow: str, instance_id: str | None, params: str | None, as_json: bool
) -> None:
    """Create an instance of WORKFLOW (prints its id)."""
    document = _parse_document_option(params, option="--params")
    answer = api.create_instance(
        _resolve(api, workflow, form="DurableWorkflow"), instance_id=instance_id, params=document
    )
    if as_json:
        _emit_json(answer)
    else:
        Console().print(f"created instance [bold]{escape(answer['id'])}[/bold]")


@instances.command("list")
@click.argument("workflow")
@click.option(
    "--status",
    default=None,
    type=click.Choice(["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]),
    help="Only instances with this status.",
)
@_json_option
@_client_command
def instances_list(api: http.Client, *, workflow: str, status: str | None, as_json: bool) -> None:
    """List the instances of WORKFLOW (all pages)."""
    rows = list(api.iter_instances(_resolve(api, workflow, form="DurableWorkflow"), status=status))
    if as_json:
        _emit_json({"instances": rows})
        return
    table = Table("ID", "STATUS", "CREATED")
    for row in rows:
        table.add_row(
            escape(row.get("id", "")), _status_text(row.get("status", "?")), row.get("createdAt", "")
        )
    console = Console()
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
    workflow_uid = _resolve(api, workflow, form="DurableWorkflow")
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
        _emit_json(answer)
    else:
        _print_instance(Console(), answer)


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
            stderr.print(f"{stamp}  {_status_text(answer.get('status', '?'))}")
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
        "--watch", is_flag=True, help="Follow the instance until it is complete, errored or terminated."
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
@_json_option
@_client_command
def instances_status(api: http.Client, **options: Any) -> None:
    """Show the status of instance ID of WORKFLOW (--watch follows it until terminal)."""
    _status(api, **options)


@click.command("status")
@_with_status_options
@_json_option
@_client_command
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
@_json_option
@_client_command
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
        _resolve(api, workflow, form="DurableWorkflow"),
        instance_id,
        event_type=event_type,
        payload=document,
        idempotency_key=idempotency_key or f"tkcli-{uuid.uuid4()}",
    )
    if as_json:
        _emit_json({"accepted": True, "id": instance_id, "type": event_type})
    else:
        Console().print(f"event [bold]{escape(event_type)}[/bold] accepted for {escape(instance_id)}")


@instances.command("terminate")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@_json_option
@_client_command
def instances_terminate(api: http.Client, *, workflow: str, instance_id: str, as_json: bool) -> None:
    """Terminate instance ID (returns once the host proved its code stopped)."""
    answer = api.terminate_instance(_resolve(api, workflow, form="DurableWorkflow"), instance_id)
    if as_json:
        _emit_json({"id": instance_id, **answer})
    else:
        Console().print(f"{escape(instance_id)}: {_status_text(answer.get('status', '?'))}")


@instances.command("history")
@click.argument("workflow")
@click.argument("instance_id", metavar="ID")
@_json_option
@_client_command
def instances_history(api: http.Client, *, workflow: str, instance_id: str, as_json: bool) -> None:
    """Show the instance's event history, oldest first (CONTRACT §6)."""
    events = list(api.iter_history(_resolve(api, workflow, form="DurableWorkflow"), instance_id))
    if as_json:
        _emit_json({"events": events})
        return
    table = Table("#", "TIME", "EVENT", "ATTRIBUTES")
    for event in events:
        attributes = event.get("attributes") or {}
        table.add_row(
            str(event.get("eventId", "")),
            str(event.get("eventTimestamp", "")),
            escape(str(event.get("eventType", ""))),
            escape(_compact(attributes)) if attributes else "",
        )
    Console().print(table)


# --- cron runs ------------------------------------------------------------------------------


@click.command("runs")
@click.argument("trigger")
@_json_option
@_client_command
def runs(api: http.Client, *, trigger: str, as_json: bool) -> None:
    """List the recorded matches of a cron TRIGGER (name or UID), newest first (CONTRACT §7)."""
    rows = list(api.iter_runs(_resolve(api, trigger, form="WorkerCronTrigger")))
    if as_json:
        _emit_json({"runs": rows})
        return
    table = Table("SCHEDULED", "CRON", "RECORDED", "OUTCOME")
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
            outcome += f": {failed[-1] if isinstance(failed[-1], str) else _compact(failed[-1])}"
        table.add_row(
            str(scheduled), escape(str(run.get("cron", ""))), str(run.get("recordedAt", "")), escape(outcome)
        )
    console = Console()
    console.print(table)
    console.print(f"{len(rows)} match(es)")


# --- deploy ---------------------------------------------------------------------------------


@click.command("deploy")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds to wait for each Operation.",
)
@_json_option
@_client_command
def deploy(api: http.Client, *, directory: str, timeout: float, as_json: bool) -> None:
    """Create or update the Worker, a new Version, the Deployment, workflows and cron triggers of DIR.

    DIR holds takohost.toml and the worker's .py files. Re-running is safe: every mutation
    carries an Idempotency-Key derived from its content.
    """
    project = manifests.load_project(directory)
    summary = Deployer(api, console=stderr, timeout=timeout).run(project)
    if as_json:
        _emit_json(summary)
    else:
        stderr.print(
            f"[green]deployed[/green] {escape(project.manifest.worker)} "
            f"(version {escape(summary['version']['name'])}) to Space {escape(api.space)}"
        )


class Deployer:
    """Converge a Space on a :class:`manifests.Project` (``takohost deploy``), in this order:

    1. the ModuleWorker (found by name; created, or PUT when its description changed);
    2. the DurableWorkflows (created before the Version, whose ``workflowBindings`` name their
       UIDs; seed 000 allows a Workflow without a Deployment). A create that the host rejects
       with ``dependency_conflict`` because the current Deployment's code lacks the class is
       deferred: the new code is deployed first, then the Workflow is created, then a Version
       with its binding is deployed;
    3. a new WorkerVersion from the directory's modules, named by its content digest (the same
       content reuses the same Version; a failed validation reports the Operation's error);
    4. the Deployment of the Worker, at 100 % on that Version;
    5. the WorkerCronTriggers (created, or PUT with the new cron).

    Every mutation waits for its Operation (CONTRACT §2.3) and carries an ``Idempotency-Key``
    derived from its content and from the state it changes (create: the body and, after a
    deleted namesake, that namesake's UID; update: the body and the generation it replaces),
    so re-running after a lost answer finds the same Operation. ``resource_busy`` is retried
    until ``timeout``. Nothing is mutated when a pre-flight check finds a conflict (a name held
    by another Form, a Workflow whose class or Worker would change, a Trigger of another Worker).
    Resources no longer in the manifest are left alone.
    """

    def __init__(self, api: http.Client, *, console: Console, timeout: float) -> None:
        self.api = api
        self.console = console
        self.timeout = timeout
        self.by_name: dict[str, dict[str, Any]] = {}

    def run(self, project: manifests.Project) -> dict[str, Any]:
        """Apply ``project``; returns ``{"space", "worker", "version", "deployment", "workflows",
        "triggers"}`` (each ``{"name", "uid", …}``). Raises ``ClientError`` / ``CommandFailed``."""
        m = project.manifest
        self.by_name = {r["name"]: r for r in self.api.iter_resources()}
        self._preflight(m)
        self._note_unmanaged(m)
        worker = self._ensure("ModuleWorker", m.worker, m.worker_spec(), existing=self.by_name.get(m.worker))
        ref = {"resourceUid": worker["uid"]}
        workflows: dict[str, dict[str, Any]] = {}
        deferred: list[manifests.WorkflowDecl] = []
        for decl in m.workflows:
            try:
                workflows[decl.name] = self._ensure(
                    "DurableWorkflow",
                    decl.name,
                    {"worker": ref, "className": decl.class_name},
                    existing=self.by_name.get(decl.name),
                )
            except http.ClientError as exc:
                if exc.code != "dependency_conflict" or decl.name in self.by_name:
                    raise
                self.console.print(
                    f"[yellow]…[/yellow] DurableWorkflow {escape(decl.name)} waits for the new "
                    f"code to be deployed ({escape(exc.message)})"
                )
                deferred.append(decl)
        version = self._version(project, ref, workflows)
        deployment = self._deployment(m, ref, version)
        if deferred:
            for decl in deferred:
                workflows[decl.name] = self._ensure(
                    "DurableWorkflow", decl.name, {"worker": ref, "className": decl.class_name}, existing=None
                )
            if any(decl.binding for decl in deferred):
                version = self._version(project, ref, workflows)
                deployment = self._deployment(m, ref, version)
        triggers = [
            self._ensure(
                "WorkerCronTrigger",
                t.name,
                {"worker": ref, "cron": t.cron},
                existing=self.by_name.get(t.name),
            )
            for t in m.triggers
        ]
        return {
            "space": self.api.space,
            "worker": _brief(worker),
            "version": _brief(version),
            "deployment": _brief(deployment),
            "workflows": [
                {**_brief(workflows[d.name]), "className": d.class_name, "binding": d.binding}
                for d in m.workflows
            ],
            "triggers": [{**_brief(t), "cron": t["spec"]["cron"]} for t in triggers],
        }

    # -- checks before any mutation --

    def _preflight(self, m: manifests.Manifest) -> None:
        worker = self.by_name.get(m.worker)
        worker_uid = worker["uid"] if worker is not None else None
        wanted = (
            [(m.worker, "ModuleWorker")]
            + [(d.name, "DurableWorkflow") for d in m.workflows]
            + [(t.name, "WorkerCronTrigger") for t in m.triggers]
        )
        if self._deployment_of(worker_uid) is None:
            wanted.append((m.deployment_name, "WorkerDeployment"))
        for name, form in wanted:
            found = self.by_name.get(name)
            if found is not None and _short_form(found) != form:
                raise CommandFailed(
                    "name_conflict",
                    f"the name {name!r} is already used by a "
                    f"{_short_form(found)} in Space {self.api.space!r}",
                    "resource names are unique per Space across all Forms; rename it in takohost.toml",
                )
            if found is not None and form == "WorkerDeployment":
                raise CommandFailed("name_conflict", f"{name!r} is the Deployment of another Worker")
        for decl in m.workflows:
            found = self.by_name.get(decl.name)
            if found is None:
                continue
            spec = found.get("spec") or {}
            if (spec.get("worker") or {}).get("resourceUid") != worker_uid:
                raise CommandFailed(
                    "immutable_field",
                    f"DurableWorkflow {decl.name!r} belongs to another Worker",
                    "a workflow's worker cannot change: choose another name",
                )
            if spec.get("className") != decl.class_name:
                raise CommandFailed(
                    "immutable_field",
                    f"DurableWorkflow {decl.name!r} runs class "
                    f"{spec.get('className')!r}, not {decl.class_name!r}",
                    "a workflow's class cannot change (seed 000): choose another name, or "
                    "delete the workflow and its instances first",
                )
        for trigger in m.triggers:
            found = self.by_name.get(trigger.name)
            if (
                found is not None
                and ((found.get("spec") or {}).get("worker") or {}).get("resourceUid") != worker_uid
            ):
                raise CommandFailed(
                    "immutable_field",
                    f"WorkerCronTrigger {trigger.name!r} belongs to another Worker",
                    "a trigger's worker cannot change (seed 003): choose another name",
                )

    def _note_unmanaged(self, m: manifests.Manifest) -> None:
        """Say which Workflows/Triggers of this Worker the manifest no longer declares (kept as they are)."""
        worker = self.by_name.get(m.worker)
        declared = {d.name for d in m.workflows} | {t.name for t in m.triggers}
        for resource in self.by_name.values():
            form = _short_form(resource)
            if (
                worker is not None
                and form in ("DurableWorkflow", "WorkerCronTrigger")
                and resource["name"] not in declared
                and ((resource.get("spec") or {}).get("worker") or {}).get("resourceUid") == worker["uid"]
            ):
                self.console.print(
                    f"[yellow]![/yellow] {form} {escape(resource['name'])} is not in takohost.toml; it is "
                    "left as it is (delete it to stop it; the new code must still provide it until then)"
                )

    def _deployment_of(self, worker_uid: str | None) -> dict[str, Any] | None:
        if worker_uid is None:
            return None
        return next(
            (
                r
                for r in self.by_name.values()
                if _short_form(r) == "WorkerDeployment"
                and ((r.get("spec") or {}).get("worker") or {}).get("resourceUid") == worker_uid
            ),
            None,
        )

    # -- the Version and the Deployment --

    def _version(
        self, project: manifests.Project, ref: dict[str, str], workflows: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        m = project.manifest
        bindings = [
            {"name": d.binding, "resource": {"resourceUid": workflows[d.name]["uid"]}}
            for d in m.workflows
            if d.binding is not None and d.name in workflows
        ]
        spec = {
            "worker": ref,
            "mainModule": m.main,
            "modules": project.modules,
            "vars": m.variables,
            "workflowBindings": bindings,
        }
        name = m.version_name(manifests.content_digest(spec))
        existing = self.by_name.get(name)
        if existing is not None and existing.get("spec") != spec:
            raise CommandFailed("name_conflict", f"WorkerVersion {name!r} exists with other content")
        if existing is not None and existing.get("phase") == "failed":
            operation = self.api.get_operation(existing["latestOperationId"])
            self._raise_failed(operation, label=f"WorkerVersion {name} (same code as before)")
        return self._ensure("WorkerVersion", name, spec, existing=existing)

    def _deployment(
        self, m: manifests.Manifest, ref: dict[str, str], version: dict[str, Any]
    ) -> dict[str, Any]:
        spec = {"worker": ref, "versions": [{"version": {"resourceUid": version["uid"]}, "weight": 100}]}
        existing = self._deployment_of(ref["resourceUid"])
        return self._ensure(
            "WorkerDeployment", existing["name"] if existing else m.deployment_name, spec, existing=existing
        )

    # -- one resource --

    def _ensure(
        self, form: str, name: str, spec: dict[str, Any], *, existing: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Create, update (PUT) or keep one resource so that its spec is ``spec``; returns it."""
        if existing is None:
            resource = self._create(form, name, spec)
        elif existing.get("spec") == spec and existing.get("phase") != "failed":
            resource = self._settle(existing, form=form)
        else:
            resource = self._update(existing, form=form, spec=spec)
        self.by_name[resource["name"]] = resource
        return resource

    def _create(self, form: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        label = f"create {form} {name}"
        after: str | None = None
        for _ in range(20):
            key = _deploy_key(
                {
                    "call": "create",
                    "space": self.api.space,
                    "form": form,
                    "name": name,
                    "spec": spec,
                    "after": after,
                }
            )
            operation = self._busy_retry(
                label,
                lambda key=key: self.api.create_resource(
                    form=_FORM[form], name=name, spec=spec, idempotency_key=key
                ),
            )
            try:
                current = self.api.get_resource(operation["resourceUid"])
            except http.ClientError as exc:
                if exc.code != "not_found":
                    raise
                current = None
            if current is None or current.get("phase") == "deleting":
                # The key answered an earlier create of a namesake that was deleted since: chain a new key.
                after = operation["resourceUid"]
                continue
            self._await(operation, label=label)
            return self.api.get_resource(operation["resourceUid"])
        raise CommandFailed("internal_error", f"{label}: too many deleted namesakes answer this content")

    def _update(self, existing: dict[str, Any], *, form: str, spec: dict[str, Any]) -> dict[str, Any]:
        label = f"update {form} {existing['name']}"
        key = _deploy_key(
            {
                "call": "update",
                "space": self.api.space,
                "uid": existing["uid"],
                "generation": existing.get("generation"),
                "spec": spec,
            }
        )
        operation = self._busy_retry(
            label, lambda: self.api.update_resource(existing["uid"], spec=spec, idempotency_key=key)
        )
        self._await(operation, label=label)
        return self.api.get_resource(existing["uid"])

    def _settle(self, existing: dict[str, Any], *, form: str) -> dict[str, Any]:
        label = f"{form} {existing['name']}"
        if existing.get("phase") == "deleting":
            raise CommandFailed("resource_busy", f"{label} is being deleted; re-run deploy when it is gone")
        if existing.get("phase") == "reconciling" and existing.get("latestOperationId"):
            self._await(self.api.get_operation(existing["latestOperationId"]), label=f"finish {label}")
            return self.api.get_resource(existing["uid"])
        self.console.print(f"[dim]·[/dim] {escape(label)} is up to date")
        return existing

    # -- Operations --

    def _busy_retry(self, label: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``call()``, repeated while the host answers ``resource_busy`` (short-lived, §2.3)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return call()
            except http.ClientError as exc:
                if exc.code != "resource_busy" or time.monotonic() >= deadline:
                    raise
            with self.console.status(f"{escape(label)}: resource busy, retrying"):
                time.sleep(1.0)

    def _await(self, operation: dict[str, Any], *, label: str) -> dict[str, Any]:
        """Wait for ``operation`` to finish; print ✓ or raise ``CommandFailed`` with its error."""
        with self.console.status(f"{escape(label)} (Operation {escape(operation['id'])})") as status:

            def show(op: dict[str, Any]) -> None:
                status.update(
                    f"{escape(label)}: {escape(str(op.get('state')))} (Operation {escape(op['id'])})"
                )

            if operation.get("state") not in http.TERMINAL_OPERATION_STATES:
                operation = self.api.wait_operation(operation["id"], timeout=self.timeout, on_poll=show)
        if operation.get("state") == "failed":
            self._raise_failed(operation, label=label)
        self.console.print(f"[green]✓[/green] {escape(label)}")
        return operation

    def _raise_failed(self, operation: dict[str, Any], *, label: str) -> None:
        error = operation.get("error") or {}
        effect = operation.get("effect", "unknown")
        raise CommandFailed(
            str(error.get("code") or "operation_failed"),
            str(error.get("message") or "the Operation failed without a message"),
            f"while: {label} (Operation {operation.get('id')}, effect {effect})",
        )


def _deploy_key(value: dict[str, Any]) -> str:
    """An ``Idempotency-Key`` (≤ 255 printable ASCII) derived from ``value``'s canonical JSON."""
    return "takohost-deploy-" + manifests.content_digest(value)


def _short_form(resource: dict[str, Any]) -> str:
    form = resource.get("form", "")
    return next((short for short, url in _FORM.items() if form in (short, url)), form)


def _brief(resource: dict[str, Any]) -> dict[str, Any]:
    return {"name": resource["name"], "uid": resource["uid"]}


# --- registration ---------------------------------------------------------------------------

_COMMANDS: tuple[click.Command, ...] = (deploy, instances, status_alias, runs)


def register(group: click.Group) -> None:
    """Add the client commands to ``group`` (idempotent: a command of the same name is replaced)."""
    for command in _COMMANDS:
        group.add_command(command)


def _cli_groups() -> list[click.Group]:
    """The ``main`` group of each loaded copy of ``takohost.cli``: the package module, and the
    ``__main__`` module when run as ``python -m takohost.cli`` (the same file, loaded twice)."""
    groups: list[click.Group] = []
    for module_name in ("takohost.cli", "__main__"):
        module = sys.modules.get(module_name)
        spec = getattr(module, "__spec__", None)
        group = getattr(module, "main", None)
        if (
            spec is not None
            and spec.name == "takohost.cli"
            and isinstance(group, click.Group)
            and group not in groups
        ):
            groups.append(group)
    return groups


for _group in _cli_groups():
    register(_group)
