"""Test a workflow in process, from pytest, with the host's own step semantics and virtual time
(docs/testing.md).

::

    from takohost import testing

    def test_order_is_charged_once_and_completes():
        inst = testing.start("examples/orders", params={...}, auto=False, fail={"charge card": 2})
        inst.run(until_waiting=True)                         # two retries, each in a fresh context
        assert inst.status == "waiting"
        inst.send_event("shipped", {"trackingNumber": "T-1"})
        assert inst.status == "complete" and inst.output["trackingNumber"] == "T-1"

What runs is the host's own code, not a model of it: the sandbox child's run driver and SDK
(``takohost.runtime``) on a thread, answered by the engine's pure step decisions, commit plans and
history builders (``takohost.domain``: ``decide``, ``commits``, ``history``, ``inbox``) and the
parent's answers (``takohost.runtime.parent``). Every ``sleep``, ``wait_for_event`` and retry ends
the context: its child never runs again, and the next context imports the workflow's module
fresh (module state starts over) and replays the recorded steps by name. Documents are checked
as the host checks them (1 MiB of RFC 8785 JSON; a non-document effect result is a failed
attempt); errors keep their provenance (only a ``StepFailed`` the host raised ends the instance
``step_failed``; a step name reused as another kind is ``step_definition_mismatch``).

Time is virtual: ``auto=True`` (the default) completes every sleep, retry delay and wait timeout
at once, the clock (``inst.now``) jumping to each; ``auto=False`` stops whenever the instance
waits for time, and :meth:`Instance.advance` moves the clock explicitly. :func:`replay` replays
an exported history (``takohost instances history WF ID --export FILE``) against the code.

Standard library and ``takohost`` only (it ships with the SDK).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import pathlib
from typing import Any

from takohost import manifest
from takohost.testing import _child
from takohost.testing._instance import TERMINAL, Instance, Workflow
from takohost.testing._replay import FORMAT, Divergence, HistoryFile, ReplayResult, load_history, replay

__all__ = [
    "DEFAULT_START",
    "FORMAT",
    "HistoryFile",
    "TERMINAL",
    "Divergence",
    "Instance",
    "ReplayResult",
    "Workflow",
    "load_history",
    "replay",
    "start",
    "workflow",
]

#: The virtual clock's default start: a fixed instant, so histories are reproducible.
DEFAULT_START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def workflow(
    target: type | str | pathlib.Path,
    *,
    class_name: str | None = None,
    env: dict[str, Any] | None = None,
) -> Workflow:
    """What to run: a workflow class, or a deployable directory (its ``takohost.toml`` and
    ``.py`` files, read as ``takohost deploy`` reads them) with ``class_name`` (default: the
    manifest's only, or first, workflow). ``env`` adds or overrides ``env.NAME`` vars (a
    directory's ``[vars]`` are the defaults). Raises ``ManifestError`` for a bad directory,
    ``ValueError`` for an unknown class."""
    variables: dict[str, Any] = {}
    bindings: tuple[str, ...] = ()
    if isinstance(target, type):
        loader: _child.Loader = _child.ClassLoader(target)
        name = class_name or target.__name__
        label = f"class:{target.__module__}.{target.__qualname__}"
    else:
        project = manifest.load_project(target)
        declared = [w.class_name for w in project.manifest.workflows]
        name = class_name or (declared[0] if declared else "")
        if not name:
            raise ValueError(f"{target}: no [[workflows]] in takohost.toml; pass class_name=")
        variables = dict(project.manifest.variables)
        bindings = tuple(w.binding for w in project.manifest.workflows if w.binding is not None)
        loader = _child.DirectoryLoader(project.modules, project.manifest.main)
        label = f"dir:{pathlib.Path(target).resolve().name}@{manifest.content_digest(project.modules)[:12]}"
    variables.update(env or {})
    return Workflow(loader=loader, class_name=name, variables=variables, bindings=bindings, version_uid=label)


def start(
    target: type | str | pathlib.Path | Workflow,
    params: dict[str, Any] | None = None,
    *,
    id: str = "test-instance",  # noqa: A002 - the API's name
    class_name: str | None = None,
    env: dict[str, Any] | None = None,
    auto: bool = True,
    fail: dict[str, int] | None = None,
    bindings: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
    timeout: float = 30.0,
) -> Instance:
    """Create an instance of ``target`` (a class, a directory or a :func:`workflow`) with
    ``params`` and run it: to its end with ``auto`` (every timer fires at once), or until it
    waits for time. ``fail`` makes the first N attempts of the named ``do`` steps fail
    (:meth:`Instance.fail`). ``bindings`` answers ``env.NAME`` binding calls: name →
    ``handler(call, args)`` returning the call's value or raising a host error (``create`` →
    ``{"id"}``, ``get`` → ``{"id"}``, ``status`` → ``{"status", …}``, ``send_event``/
    ``terminate`` → ``None``). ``now``: the clock's start (aware; default :data:`DEFAULT_START`).
    ``timeout``: real seconds the code may run without a step request before ``TimeoutError``.
    Raises ``InvalidParams``/``DocumentTooLarge`` for bad params, ``TypeError`` for a bad id."""
    if not inspect.isclass(target) and not isinstance(target, Workflow | str | pathlib.Path):
        raise TypeError("start() takes a workflow class, a directory or testing.workflow(...)")
    spec = target if isinstance(target, Workflow) else workflow(target, class_name=class_name, env=env)
    if bindings:  # env.NAME for each simulated binding, as a Version's workflowBindings would give
        spec = dataclasses.replace(spec, bindings=tuple(dict.fromkeys((*spec.bindings, *bindings))))
    return Instance(
        spec,
        instance_id=id,
        params=params,
        now=now or DEFAULT_START,
        auto=auto,
        fail=fail,
        bindings=bindings,
        timeout=timeout,
    )
