"""The host side of the sandbox protocol that every tenant run shares (docs/spec/worker-forms.md#wf-deployment, docs/spec/worker-forms.md#wf-loading, docs/spec/durable-workflow.md#dw-binding, docs/spec/cron-trigger.md#cr-handler;
``takohost/runtime/PROTOCOL.md``; docs/spec/house-rules.md#hr-one-implementation "one way to build a sandbox job and answer a binding call").

Replay contexts (``workers.engine.context``), cron deliveries (``workers.cron_tasks``) and replay
checks (``workers.version_check``):

* pick the Version to run with :func:`choose_version` — one WorkerVersion of the Worker's live
  Deployment by weight, chosen once at the start and kept (docs/spec/worker-forms.md#wf-deployment), its spec read through
  one bounded per-process cache (Versions are immutable, §3.2);
* build the child's ``job`` with :func:`job_message` (``kind``, ``modules``, ``mainModule``,
  ``vars``, ``bindings``, ``event``, ``watchdogSeconds``; ``className`` for a workflow);
* answer each ``binding`` request of the child with :func:`answer_binding`: the same call path as
  HTTP (``services.instance_bindings``), the same error names, the same text hygiene.

WorkerVersion validation has its own job (no vars, no bindings, no event):
``workers.sandbox.validation``. This module holds no state but the Version and code caches and
spawns no child.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from models.errors import DomainError
from services import instance_bindings
from takohost import errors
from takohost.runtime import bindings as runtime_bindings
from takohost.runtime import protocol
from workers import packages
from workers.sandbox import heartbeat

log = logging.getLogger(__name__)

#: WorkerVersion specs kept per process (LRU). A Version in use by a live Deployment cannot be
#: deleted (docs/spec/worker-forms.md#wf-version), so a cached spec of a picked Version is still the live one.
VERSION_CACHE_SIZE = 64
#: The ``message`` of a ``backend_unavailable`` answer when the host itself failed (the
#: exception's text stays in the worker's log: it may name host internals).
HOST_FAILED = "the host could not answer this binding call"
#: Problems of :class:`NoVersion` (the text a failed cron run shows; a context logs it).
NO_DEPLOYMENT = "the Worker has no live WorkerDeployment"
NO_WEIGHT = "the Worker's Deployment gives weight to no Version"


@dataclasses.dataclass(frozen=True)
class VersionChoice:
    """The Version a context or delivery runs.

    ``uid``: the WorkerVersion uid; ``spec``: its spec (``mainModule``, ``modules``, ``vars``,
    ``workflowBindings``); ``bindings``: binding name → DurableWorkflow uid.
    """

    uid: str
    spec: dict
    bindings: dict[str, str]


@dataclasses.dataclass(frozen=True)
class NoVersion:
    """No Version can run: ``uid`` is the picked uid when there was one, ``problem`` says why."""

    uid: str | None
    problem: str


class UnknownBinding(Exception):
    """The child asked for a binding its Version does not declare: it broke the protocol (the
    child builds ``env`` from the job's binding names, so only forged frames can do this)."""


_cache: collections.OrderedDict[str, dict] = collections.OrderedDict()
_cache_lock = threading.Lock()

#: Base64 characters of compiled modules this process keeps, over all Versions (LRU).
CODE_CACHE_CHARS = 32 * 1024 * 1024
#: A Version whose source is larger than this many characters compiles in every context (its job
#: with the compiled code would not stay well below ``protocol.MAX_FRAME_BYTES``).
CODE_MAX_SOURCE_CHARS = 1024 * 1024
_code: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()
_code_chars = 0


def caches_code(version: VersionChoice) -> bool:
    """True when ``version``'s compiled modules may be kept and sent with its jobs (PROTOCOL.md
    "Compiled modules"): its source is at most :data:`CODE_MAX_SOURCE_CHARS` characters."""
    modules = version.spec.get("modules") or {}
    return sum(len(source) for source in modules.values()) <= CODE_MAX_SOURCE_CHARS


def code_for(version_uid: str) -> dict[str, str] | None:
    """The compiled modules kept for Version ``version_uid`` (module path → base64), or ``None``."""
    with _cache_lock:
        code = _code.get(version_uid)
        if code is not None:
            _code.move_to_end(version_uid)
        return code


def remember_code(version_uid: str, modules: dict[str, str]) -> bool:
    """Keep the compiled ``modules`` a child of Version ``version_uid`` sent (the caller checked
    that each path is one of the Version's); at most ``protocol.CODE_MAX_CHARS`` characters per
    Version, :data:`CODE_CACHE_CHARS` in all (the least recently used go first). The blobs are never
    decoded here: only children of the same Version receive them, and a child that cannot load one
    compiles the source. Returns False when they are too large to keep."""
    global _code_chars
    size = sum(len(blob) for blob in modules.values())
    if size > protocol.CODE_MAX_CHARS:
        return False
    with _cache_lock:
        old = _code.pop(version_uid, None)
        if old is not None:
            _code_chars -= sum(len(blob) for blob in old.values())
        _code[version_uid] = dict(modules)
        _code_chars += size
        while _code_chars > CODE_CACHE_CHARS and len(_code) > 1:
            _, evicted = _code.popitem(last=False)
            _code_chars -= sum(len(blob) for blob in evicted.values())
    return True


def pick_version(deployment_spec: dict | None, *, rng: random.Random | None = None) -> str | None:
    """One Version uid chosen by weight from a WorkerDeployment spec (docs/spec/worker-forms.md#wf-deployment).

    ``deployment_spec`` is ``{"versions": [{"version": {"resourceUid"}, "weight": 1..100}, …]}``
    or ``None`` (no live Deployment). Entries of weight 0 never run. Returns ``None`` when
    nothing has weight. Pure apart from ``rng`` (default: the ``random`` module).
    """
    entries = [
        (e["version"]["resourceUid"], int(e["weight"]))
        for e in (deployment_spec or {}).get("versions", [])
        if int(e.get("weight", 0)) > 0
    ]
    if not entries:
        return None
    uids, weights = zip(*entries, strict=True)
    return (rng or random).choices(uids, weights=weights)[0]


def choose_version(
    deployment_spec: dict | None,
    *,
    load: Callable[[str], dict | None],
    rng: random.Random | None = None,
) -> VersionChoice | NoVersion:
    """Pick the Version a replay context or cron delivery runs, once, at its start (docs/spec/worker-forms.md#wf-deployment).

    ``deployment_spec``: the Worker's live WorkerDeployment spec (``None``: none is live).
    ``load(uid)``: the WorkerVersion's spec, or ``None`` when it no longer exists (called only on
    a cache miss; it may run inside the caller's transaction). Returns a :class:`VersionChoice`,
    or :class:`NoVersion` with the reason (:data:`NO_DEPLOYMENT`, :data:`NO_WEIGHT`, or "no
    longer exists"). Raises whatever ``load`` raises.
    """
    if deployment_spec is None:
        return NoVersion(uid=None, problem=NO_DEPLOYMENT)
    uid = pick_version(deployment_spec, rng=rng)
    if uid is None:
        return NoVersion(uid=None, problem=NO_WEIGHT)
    with _cache_lock:
        spec = _cache.get(uid)
        if spec is not None:
            _cache.move_to_end(uid)
    if spec is None:
        spec = load(uid)
        if spec is None:
            return NoVersion(uid=uid, problem=f"WorkerVersion {uid} no longer exists")
        with _cache_lock:
            _cache[uid] = spec
            while len(_cache) > VERSION_CACHE_SIZE:
                _cache.popitem(last=False)
    names = {b["name"]: b["resource"]["resourceUid"] for b in spec.get("workflowBindings") or []}
    return VersionChoice(uid=uid, spec=spec, bindings=names)


def watchdog_seconds(ttl_ms: int) -> float:
    """The child's ``watchdogSeconds`` for a lease TTL of ``ttl_ms`` ms: half the TTL, so a child
    whose pings stop is dead before its lease can expire (``workers.sandbox.heartbeat``)."""
    return heartbeat.watchdog_seconds(ttl_ms)


def job_message(
    *,
    kind: str,
    version: VersionChoice,
    event: dict,
    watchdog_seconds: float,
    class_name: str | None = None,
    code: dict[str, str] | None = None,
    want_code: bool = False,
) -> dict[str, Any]:
    """The ``job`` frame of a child (PROTOCOL.md "Start"; ``Zygote.spawn`` adds ``op``).

    ``kind`` is ``"workflow"`` (``class_name`` required; ``event = {"instanceId", "params"?}``)
    or ``"scheduled"`` (``event = {"cron", "scheduledTime"}``, epoch ms; docs/spec/cron-trigger.md#cr-handler).
    ``watchdog_seconds``: the child kills itself after that long without a frame from the parent.
    ``env`` gets exactly the Version's ``vars`` and its binding names (docs/spec/worker-forms.md#wf-loading).
    ``code``: the Version's compiled modules (:func:`code_for`); ``want_code``: ask the child to
    send them (PROTOCOL.md "Compiled modules").
    ``packages``: the name of the Version's package layer when it has ``requirements``
    (:func:`packages_name`).
    Raises ``ValueError`` for another kind or a workflow job without ``class_name``;
    ``packages.PackageError`` when the Version's layer cannot be installed on this machine.
    """
    if kind not in ("workflow", "scheduled"):
        raise ValueError(f"job kind must be workflow or scheduled, not {kind!r}")
    message: dict[str, Any] = {
        "kind": kind,
        "modules": version.spec.get("modules") or {},
        "mainModule": version.spec.get("mainModule"),
        "vars": version.spec.get("vars") or {},
        "bindings": sorted(version.bindings),
        "event": event,
        "watchdogSeconds": watchdog_seconds,
    }
    if kind == "workflow":
        if not class_name:
            raise ValueError("a workflow job needs class_name")
        message["className"] = class_name
    if code:
        message["code"] = code
    elif want_code:
        message["wantCode"] = True
    if version.spec.get("requirements"):
        message["packages"] = packages_name(version)
    return message


_packages: collections.OrderedDict[str, str] = collections.OrderedDict()


def packages_name(version: VersionChoice) -> str:
    """The name of ``version``'s package layer (the job's ``packages``; docs/packages.md),
    installed on this machine first if it is not here yet (a Version validated on another
    machine). Kept per process by Version uid (a Version's pins never change).

    Raises:
        packages.PackageError: the layer cannot be installed here (the context fails and is retried).
    """
    with _cache_lock:
        path = _packages.get(version.uid)
    if path is not None:
        return path
    layer = packages.layer_for_spec(version.spec)
    assert layer is not None
    with _cache_lock:
        _packages[version.uid] = layer.name
        while len(_packages) > VERSION_CACHE_SIZE:
            _packages.popitem(last=False)
    return layer.name


def error_name(exc: DomainError) -> str:
    """The ``binding_error`` name for a ``DomainError`` of a binding call (docs/spec/worker-forms.md#wf-errors, docs/spec/durable-workflow.md#dw-binding, docs/spec/host-limits.md#hl-decisions).

    An SDK error name (``instance_exists``, ``unknown_instance``, ``invalid_params``,
    ``document_too_large``, ``instance_terminal``, ``event_queue_full``, ``backend_unavailable``)
    is passed on; ``invalid_request`` stays ``invalid_request`` (the child raises ``TypeError``);
    any other code (``not_found``: the bound DurableWorkflow is gone or being deleted) is
    ``backend_unavailable``.
    """
    if exc.code in errors.ERROR_CLASSES or exc.code == runtime_bindings.TYPE_ERROR_NAME:
        return exc.code
    return "backend_unavailable"


def answer_binding(request: dict, *, space: str, bindings: dict[str, str]) -> dict[str, Any]:
    """Answer one ``binding`` request of a child (PROTOCOL.md "Bindings"), for every job kind.

    ``request`` is a message already checked by ``protocol.check_child_message``:
    ``{"op": "binding", "binding", "call", "args"}``. ``bindings``: the running Version's binding
    name → DurableWorkflow uid. Runs the call through ``instance_bindings.call_binding`` (the HTTP
    code path) and returns ``{"op": "binding_result", "value"}`` or ``{"op": "binding_error",
    "name", "message"}`` with the name from :func:`error_name`; a host failure is
    ``backend_unavailable`` (:data:`HOST_FAILED`; logged). Never raises for the call's outcome.

    Raises:
        UnknownBinding: ``request["binding"]`` is not one of ``bindings`` (a protocol violation).
    """
    workflow_uid = bindings.get(request["binding"])
    if workflow_uid is None:
        raise UnknownBinding(f"unknown binding {protocol.safe_text(request['binding'])!r}")
    try:
        value = instance_bindings.call_binding(
            space=space, workflow_uid=workflow_uid, call=request["call"], args=request["args"]
        )
    except DomainError as exc:
        return {"op": "binding_error", "name": error_name(exc), "message": protocol.safe_text(exc.message)}
    except Exception:  # noqa: BLE001 - the caller sees backend_unavailable, never a host crash
        log.warning(
            "binding call failed",
            extra={"binding": request["binding"], "call": request["call"]},
            exc_info=True,
        )
        return {"op": "binding_error", "name": "backend_unavailable", "message": HOST_FAILED}
    return {"op": "binding_result", "value": value}
