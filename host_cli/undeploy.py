"""The teardown behind ``takohost undeploy DIR`` (docs/spec/host-features.md#hf-console): delete what ``takohost deploy
DIR`` made, in the order the host accepts it.

:func:`plan` reads the Space's resources and lists, for the directory's manifest: its
WorkerCronTriggers, its DurableWorkflows (deleting one purges its instances and their history),
the Worker's WorkerDeployment, every WorkerVersion of the Worker (each deploy of new code made
one, named by its content digest), then the ModuleWorker — dependants before what they depend
on. Resources of the same names that belong to another Worker are not touched. :class:`Undeployer`
deletes them one by one through the HTTP API, waiting for each Operation (the Operation helpers of
:class:`host_cli.deploy.Deployer`); every DELETE carries an ``Idempotency-Key`` derived from the
resource's UID, so re-running after an interruption converges. No click here: the command
(confirmation, ``--yes``, output) is ``host_cli.client_commands``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from host_cli import client as http
from host_cli import deploy as deploy_engine
from host_cli import manifest as manifests
from host_cli.errors import CommandFailed

__all__ = ["Doomed", "Undeployer", "plan"]

#: Deletion order: what depends on the Worker first, the Worker last.
ORDER = ("WorkerCronTrigger", "DurableWorkflow", "WorkerDeployment", "WorkerVersion", "ModuleWorker")


@dataclasses.dataclass(frozen=True)
class Doomed:
    """One resource to delete: short ``form``, ``name``, ``uid``."""

    form: str
    name: str
    uid: str

    @property
    def label(self) -> str:
        """``"Form name"``."""
        return f"{self.form} {self.name}"


def plan(resources: list[dict[str, Any]], manifest: manifests.Manifest) -> list[Doomed]:
    """What undeploying ``manifest`` deletes from a Space holding ``resources`` (the API's
    resource views), in :data:`ORDER` (pure). Empty when the Worker is not there."""
    worker = next(
        (r for r in resources if r.get("name") == manifest.worker and _form(r) == "ModuleWorker"), None
    )
    if worker is None:
        return []
    wanted = {
        "WorkerCronTrigger": {t.name for t in manifest.triggers},
        "DurableWorkflow": {w.name for w in manifest.workflows},
    }
    found: list[Doomed] = []
    for r in resources:
        form = _form(r)
        if r.get("phase") == "deleting" or form not in ORDER or form == "ModuleWorker":
            continue
        if ((r.get("spec") or {}).get("worker") or {}).get("resourceUid") != worker["uid"]:
            continue  # another Worker's resource of the same name
        if form in wanted and r.get("name") not in wanted[form]:
            continue  # not this directory's (left alone, as deploy leaves it)
        found.append(Doomed(form=form, name=r["name"], uid=r["uid"]))
    found.append(Doomed(form="ModuleWorker", name=worker["name"], uid=worker["uid"]))
    return sorted(found, key=lambda d: (ORDER.index(d.form), d.name))


class Undeployer(deploy_engine.Deployer):
    """Delete the resources of a :func:`plan`, in order, each Operation awaited."""

    def delete(self, doomed: list[Doomed]) -> list[str]:
        """Delete ``doomed`` in order; returns the labels deleted. Raises ``CommandFailed``
        (a failed Operation, with what is deleted and what is left) or ``ClientError``; on Ctrl-C
        ``interrupted`` (exit 130) saying what is left and that re-running converges."""
        deleted: list[str] = []
        current: Doomed | None = None
        try:
            for item in doomed:
                current = item
                self._delete_one(item)
                deleted.append(item.label)
        except KeyboardInterrupt:
            left = [d.label for d in doomed if d.label not in deleted]
            raise CommandFailed(
                "interrupted", "undeploy was interrupted",
                f"deleted: {', '.join(deleted) or 'nothing'}",
                f"left: {', '.join(left)}" + (f" (deleting {current.label} goes on on the host)" if current else ""),
                "re-run `takohost undeploy` on this directory: it converges", exit_status=130,
            ) from None
        except (CommandFailed, http.ClientError) as exc:
            left = [d.label for d in doomed if d.label not in deleted]
            raise CommandFailed(
                exc.code, exc.message, *getattr(exc, "hints", ()),
                f"deleted: {', '.join(deleted) or 'nothing'}; left: {', '.join(left)}",
            ) from None
        return deleted

    def _delete_one(self, item: Doomed) -> None:
        key = deploy_engine.deploy_key({"call": "undeploy", "uid": item.uid})
        label = f"delete {item.label}"
        try:
            operation = self._busy_retry(
                label, lambda: self.api.delete_resource(item.uid, idempotency_key=key)
            )
        except http.ClientError as exc:
            if exc.code == "not_found":  # gone already (a re-run)
                self.console.print(f"[dim]·[/dim] {item.label} is gone already")
                return
            raise
        self._await(operation, label=label)


def _form(resource: dict[str, Any]) -> str:
    return deploy_engine.short_form(resource)
