"""The deploy engine behind ``takohost deploy DIR`` (docs/spec/architecture.md#ar-operating): converge a Space on a directory
manifest (:class:`host_cli.manifest.Project`) through the HTTP client (``host_cli.client``).

:class:`Deployer` decides from the Space's current resources and applies each change as one
idempotent API call whose Operation it waits for; progress is printed on a ``rich`` console
(stderr under the CLI). Failures are :class:`host_cli.client.ClientError` (the API's code) or
:class:`host_cli.errors.CommandFailed` (pre-flight conflicts, failed Operations). No click here:
the command itself (options, output, exit codes) is ``host_cli.client_commands``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from host_cli import client as http
from host_cli import manifest as manifests
from host_cli import replay_check
from host_cli.errors import CommandFailed

__all__ = ["Deployer", "deploy_key", "short_form"]

_FORM = http.FORM_URLS


class Deployer:
    """Converge a Space on a :class:`manifests.Project` (``takohost deploy``), in this order:

    1. the ModuleWorker (found by name; created, or PUT when its description changed);
    2. the DurableWorkflows (created before the Version, whose ``workflowBindings`` name their
       UIDs; docs/spec/durable-workflow.md allows a Workflow without a Deployment). A create that the host rejects
       with ``dependency_conflict`` because the current Deployment's code lacks the class is
       deferred: the new code is deployed first, then the Workflow is created, then a Version
       with its binding is deployed;
    3. a new WorkerVersion from the directory's modules, named by its content digest (the same
       content reuses the same Version; a failed validation reports the Operation's error);
    4. the Deployment of the Worker, at 100 % on that Version — when the Worker already has a
       Deployment and the Version is new to it, only after the host's replay check of the Version
       against every live instance of the Worker's workflows passed (``host_cli.replay_check``;
       docs/testing.md): a diverging instance lists the instances, deletes the Version this run
       created and changes nothing else, unless ``force``. The check proves incompatibility with
       the recorded histories, never compatibility in general;
    5. the WorkerCronTriggers (created, or PUT with the new cron).

    Every mutation waits for its Operation (docs/spec/http-api.md#api-op) and carries an ``Idempotency-Key``
    derived from its content and from the state it changes (create: the body and, after a
    deleted namesake, that namesake's UID; update: the body and the generation it replaces),
    so re-running after a lost answer finds the same Operation. ``resource_busy`` is retried
    until ``timeout``. Nothing is mutated when a pre-flight check finds a conflict (a name held
    by another Form, a Workflow whose class or Worker would change, a Trigger of another Worker).
    Resources no longer in the manifest are left alone.

    A failed deploy leaves nothing half-made: every module is compiled locally first
    (:func:`check_syntax`: a syntax error, with its file and line, stops before any request); if
    the Version's validation fails on the host (an import error), or the host refuses the
    Deployment (the code lacks a declared class: ``dependency_conflict``), what this run created —
    that Version, the Workflows, the Worker — is deleted again and the error says so.
    """

    def __init__(self, api: http.Client, *, console: Console, timeout: float, force: bool = False) -> None:
        self.api = api
        self.console = console
        self.timeout = timeout
        #: Give the new Version weight even when its replay check finds diverging instances.
        self.force = force
        self.by_name: dict[str, dict[str, Any]] = {}
        #: ``(form, resource)`` created by this run, oldest first (rolled back if the Version fails).
        self.created: list[tuple[str, dict[str, Any]]] = []
        #: ``"Form name"`` of each resource this run made as the manifest says, in order.
        self.done: list[str] = []
        #: The step in flight (``"create Form name"``), for the message of an interrupted run.
        self.current: str | None = None

    def run(self, project: manifests.Project) -> dict[str, Any]:
        """Apply ``project``; returns ``{"space", "worker", "version", "deployment", "workflows",
        "triggers"}`` (each ``{"name", "uid", …}``). Raises ``ClientError`` / ``CommandFailed``
        (``interrupted``, exit status 130, on Ctrl-C: saying what is done, what was in flight, what
        is left, and that re-running converges)."""
        self.done = []
        self.current = None
        try:
            return self._run(project)
        except KeyboardInterrupt:
            raise self._interrupted(project.manifest) from None

    def _interrupted(self, m: manifests.Manifest) -> CommandFailed:
        """What an interrupted run leaves: every step is idempotent (keys derived from content),
        so nothing is rolled back; the message says what to re-run."""
        done = set(self.done)
        plan = [f"ModuleWorker {m.worker}"]
        plan += [f"DurableWorkflow {d.name}" for d in m.workflows]
        plan += ["WorkerVersion (the new code)", "WorkerDeployment"]
        plan += [f"WorkerCronTrigger {t.name}" for t in m.triggers]
        version_done = any(label.startswith("WorkerVersion ") for label in done)
        deployment_done = any(label.startswith("WorkerDeployment ") for label in done)
        left = [
            label for label in plan
            if label not in done
            and not (label.startswith("WorkerVersion") and version_done)
            and not (label == "WorkerDeployment" and deployment_done)
        ]
        hints = [f"done: {', '.join(self.done) if self.done else 'nothing'}"]
        if self.current:
            hints.append(f"in flight: {self.current} (its Operation goes on on the host)")
        hints.append(f"left: {', '.join(left) if left else 'nothing'}")
        hints.append("re-run `takohost deploy` on this directory: it converges (every step is idempotent); "
                     "`takohost undeploy` removes what it made")
        return CommandFailed("interrupted", "deploy was interrupted", *hints, exit_status=130)

    def _run(self, project: manifests.Project) -> dict[str, Any]:
        m = project.manifest
        check_syntax(project)
        self.by_name = {r["name"]: r for r in self.api.iter_resources()}
        self.created = []
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
        try:
            version = self._version(project, ref, workflows)
            self._replay_check(ref, version)
            deployment = self._deployment(m, ref, version)
        except (CommandFailed, http.ClientError) as exc:  # failed Version or check, refused Deployment
            raise self._rolled_back(exc) from None
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

    # -- a failed Version: undo what this run created --

    def _rolled_back(self, failure: CommandFailed | http.ClientError) -> CommandFailed:
        """Delete what this run created (newest first: the failed Version, the Workflows, the
        Worker) so that a failed deploy leaves the Space as it was; returns ``failure`` with a hint
        saying what was undone (or what could not be, and that re-running deploy converges)."""
        undone, kept = [], []
        for form, resource in reversed(self.created):
            label = f"{form} {resource['name']}"
            try:
                current = self.api.get_resource(resource["uid"])
                key = deploy_key({"call": "rollback", "uid": resource["uid"]})
                operation = self._busy_retry(
                    f"delete {label}",
                    functools.partial(self.api.delete_resource, resource["uid"], idempotency_key=key),
                )
                operation = self.api.wait_operation(operation["id"], timeout=self.timeout)
            except http.ClientError as exc:
                if exc.code == "not_found":
                    continue
                kept.append(f"{label} ({exc.code})")
                continue
            if operation.get("state") == "succeeded":
                undone.append(label)
                self.by_name.pop(current["name"], None)
            else:
                kept.append(f"{label} ({(operation.get('error') or {}).get('code', 'failed')})")
        hints = list(getattr(failure, "hints", ()))
        if undone:
            hints.append(f"nothing is left half-made: deleted what this deploy created ({', '.join(undone)})")
        if kept:
            hints.append(f"could not delete {', '.join(kept)}; fix the code and re-run deploy: it converges")
        return CommandFailed(failure.code, failure.message, *hints)

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
            if found is not None and short_form(found) != form:
                raise CommandFailed(
                    "name_conflict",
                    f"the name {name!r} is already used by a "
                    f"{short_form(found)} in Space {self.api.space!r}",
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
                    "a workflow's class cannot change (docs/spec/durable-workflow.md): choose another name, or "
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
                    "a trigger's worker cannot change (docs/spec/cron-trigger.md): choose another name",
                )

    def _note_unmanaged(self, m: manifests.Manifest) -> None:
        """Say which Workflows/Triggers of this Worker the manifest no longer declares (kept as they are)."""
        worker = self.by_name.get(m.worker)
        declared = {d.name for d in m.workflows} | {t.name for t in m.triggers}
        for resource in self.by_name.values():
            form = short_form(resource)
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
                if short_form(r) == "WorkerDeployment"
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
        if m.requirements:  # absent otherwise: the digests (names) of Versions without any stay as they were
            spec["requirements"] = list(m.requirements)
        name = m.version_name(manifests.content_digest(spec))
        existing = self.by_name.get(name)
        if existing is not None and existing.get("spec") != spec:
            raise CommandFailed("name_conflict", f"WorkerVersion {name!r} exists with other content")
        if existing is not None and existing.get("phase") == "failed":
            operation = self.api.get_operation(existing["latestOperationId"])
            self._raise_failed(operation, label=f"WorkerVersion {name} (same code as before)")
        return self._ensure("WorkerVersion", name, spec, existing=existing)

    def _replay_check(self, ref: dict[str, str], version: dict[str, Any]) -> None:
        """Before ``version`` gets weight in the Worker's existing Deployment: the host's replay
        check against the live instances (none to check without a Deployment, or when the
        Deployment already gives the Version weight). Raises ``CommandFailed`` ``incompatible`` /
        ``check_incomplete`` (the instances printed first) unless ``self.force``."""
        existing = self._deployment_of(ref["resourceUid"])
        if existing is None:
            return
        weighted = {v["version"]["resourceUid"] for v in (existing.get("spec") or {}).get("versions", []) if v["weight"] > 0}
        if version["uid"] in weighted:
            return
        label = f"replay check of WorkerVersion {version['name']} against the live instances"
        self.current = label
        with self.console.status(escape(label)) as status:

            def show(progress: dict[str, Any]) -> None:
                status.update(f"{escape(label)}: {progress['checked']}/{progress['total']} "
                              f"({replay_check.totals_line(progress['totals'])})")

            check = replay_check.run(self.api, version["uid"], timeout=self.timeout, on_progress=show)
        self.current = None
        failure = replay_check.failed(check, console=self.console)
        totals = replay_check.totals_line(check.get("totals") or {})
        if failure is None:
            self.console.print(f"[green]✓[/green] {escape(label)}: {totals}")
            return
        if self.force:
            self.console.print(f"[yellow]![/yellow] {escape(label)}: {totals}; deploying anyway (--force)")
            return
        failure.hints = (*failure.hints, f"{label}: {totals}",
                         "nothing was deployed; fix the code, or re-run with --force to give it the traffic anyway")
        raise failure

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
        self.current = f"{'create' if existing is None else 'update'} {form} {name}"
        if existing is None:
            resource = self._create(form, name, spec)
        elif existing.get("spec") == spec and existing.get("phase") != "failed":
            resource = self._settle(existing, form=form)
        else:
            resource = self._update(existing, form=form, spec=spec)
        self.by_name[resource["name"]] = resource
        self.current = None
        self.done.append(f"{form} {resource['name']}")
        return resource

    def _create(self, form: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        label = f"create {form} {name}"
        after: str | None = None
        for _ in range(20):
            key = deploy_key(
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
                functools.partial(
                    self.api.create_resource, form=_FORM[form], name=name, spec=spec, idempotency_key=key
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
            self.created.append((form, current))  # before the wait: a failed Version is undone too
            self._await(operation, label=label)
            return self.api.get_resource(operation["resourceUid"])
        raise CommandFailed("internal_error", f"{label}: too many deleted namesakes answer this content")

    def _update(self, existing: dict[str, Any], *, form: str, spec: dict[str, Any]) -> dict[str, Any]:
        label = f"update {form} {existing['name']}"
        key = deploy_key(
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


def check_syntax(project: manifests.Project) -> None:
    """Compile every module of ``project`` locally before any request: a syntax error stops the
    deploy with ``syntax_error`` ``"main.py:12: invalid syntax"`` (file and line) and changes
    nothing in the Space. Import-time errors need the host's sandbox and are reported by the
    Version's failed Operation instead (then :meth:`Deployer._rolled_back` undoes this run)."""
    for path, source in sorted(project.modules.items()):
        try:
            compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f"{path}:{exc.lineno}" if exc.lineno else path
            raise CommandFailed(
                "syntax_error",
                f"{where}: {exc.msg}",
                *([f"  {exc.text.rstrip()}"] if exc.text else []),
                "nothing was changed in the Space; fix the file and re-run deploy",
            ) from None
        except ValueError as exc:  # e.g. a NUL byte in the source
            raise CommandFailed("syntax_error", f"{path}: {exc}",
                                "nothing was changed in the Space") from None


def deploy_key(value: dict[str, Any]) -> str:
    """An ``Idempotency-Key`` (≤ 255 printable ASCII) derived from ``value``'s canonical JSON."""
    return "takohost-deploy-" + manifests.content_digest(value)


def short_form(resource: dict[str, Any]) -> str:
    """The short Form name (``"ModuleWorker"``…) of ``resource``, whose ``form`` is short or a URL."""
    form = resource.get("form", "")
    return next((short for short, url in _FORM.items() if form in (short, url)), form)


def _brief(resource: dict[str, Any]) -> dict[str, Any]:
    """``{"name", "uid"}`` of ``resource``, as in the deploy summary."""
    return {"name": resource["name"], "uid": resource["uid"]}
