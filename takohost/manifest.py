"""``DIR/takohost.toml``: what ``takohost deploy DIR`` creates (docs/spec/host-features.md#hf-one-command; docs/spec/worker-forms.md), read
by the CLI (``host_cli.manifest``, which adds the host's cron check) and by the test kit
(``takohost.testing``, which runs the directory's workflows in process).

The file is parsed with :mod:`tomllib` against a **closed** schema (an unknown table or key is
an error, like the Forms' closed specs), and every rule the host would check later is checked
here first, so that a typo fails before any request is sent::

    requirements = ["requests==2.32.3"]  # optional, before any table: exact pins (docs/packages.md)

    [worker]
    name = "orders"               # ModuleWorker resource name (docs/spec/http-api.md#api-res name rule)
    main = "main.py"              # WorkerVersion mainModule (default "main.py")
    description = "Order flow"    # optional, at most 1024 characters (docs/spec/worker-forms.md#wf-worker)

    [vars]                        # optional: env.NAME values, a document (docs/spec/worker-forms.md#wf-version, docs/spec/durable-workflow.md#dw-doc)
    CURRENCY = "EUR"

    [[workflows]]                 # one DurableWorkflow resource each (docs/spec/durable-workflow.md)
    name = "order-flow"           # resource name
    class = "OrderWorkflow"       # className (docs/spec/durable-workflow.md regex)
    binding = "ORDERS"            # optional: env.ORDERS in the Version's workflowBindings

    [[triggers]]                  # one WorkerCronTrigger resource each (docs/spec/cron-trigger.md)
    name = "order-digest"
    cron = "0 6 * * *"            # five-field UTC cron

Derived names: the Deployment is ``<worker>-deployment`` and each Version is
``<worker>-<12 hex digits of its content digest>`` (so identical content maps to one Version).
Resource names are unique per Space across all Forms, so every name here must be distinct.

:func:`collect_modules` reads every ``.py`` file under ``DIR`` (relative ``/`` paths, skipping
hidden directories and ``__pycache__``) and checks the WorkerVersion limits of docs/spec/worker-forms.md#wf-version.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from takohost.domain import documents, identifiers
from takohost.domain import requirements as pins

__all__ = [
    "MANIFEST_FILE",
    "Manifest",
    "ManifestError",
    "Project",
    "TriggerDecl",
    "WorkflowDecl",
    "collect_modules",
    "content_digest",
    "load",
    "load_project",
    "parse",
]

MANIFEST_FILE = "takohost.toml"
MAX_DESCRIPTION = 1024
MAX_MODULES = 64
MAX_MODULE_BYTES = 1024 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024
_MAX_NAME = 63
_DEPLOYMENT_SUFFIX = "-deployment"
_DIGEST_CHARS = 12

_TOP_KEYS = frozenset({"requirements", "worker", "vars", "workflows", "triggers"})
_WORKER_KEYS = frozenset({"name", "main", "description"})
_WORKFLOW_KEYS = frozenset({"name", "class", "binding"})
_TRIGGER_KEYS = frozenset({"name", "cron"})


class ManifestError(ValueError):
    """``takohost.toml`` (or the module set) breaks a rule; ``where`` names the place.

    ``where`` is a dotted location such as ``"workflows[2].class"`` (``""`` for the whole file);
    ``message`` says what is wrong there. ``str(err)`` is ``"takohost.toml: workflows[2].class:
    must match …"``.
    """

    def __init__(self, where: str, message: str, *, source: str = MANIFEST_FILE) -> None:
        super().__init__(where, message)
        self.where = where
        self.message = message
        self.source = source

    def __str__(self) -> str:
        return (
            f"{self.source}: {self.where}: {self.message}" if self.where else f"{self.source}: {self.message}"
        )


@dataclass(frozen=True)
class WorkflowDecl:
    """A ``[[workflows]]`` entry: DurableWorkflow ``name``, ``class_name``, optional ``binding``."""

    name: str
    class_name: str
    binding: str | None = None


@dataclass(frozen=True)
class TriggerDecl:
    """A ``[[triggers]]`` entry: WorkerCronTrigger ``name`` and its UTC ``cron`` expression."""

    name: str
    cron: str


@dataclass(frozen=True)
class Manifest:
    """A parsed ``takohost.toml`` (see the module docstring for the file format).

    ``variables`` is the ``[vars]`` table (name → JSON value, already checked as a document);
    ``requirements`` the top-level pins as written (checked by ``takohost.domain.requirements``).
    """

    worker: str
    main: str = "main.py"
    description: str | None = None
    variables: dict[str, Any] = field(default_factory=dict, hash=False)
    workflows: tuple[WorkflowDecl, ...] = ()
    triggers: tuple[TriggerDecl, ...] = ()
    requirements: tuple[str, ...] = ()

    @property
    def deployment_name(self) -> str:
        """The WorkerDeployment's resource name: ``<worker>-deployment`` (shortened to 63 chars)."""
        return _join_name(self.worker, _DEPLOYMENT_SUFFIX)

    def version_name(self, digest: str) -> str:
        """The WorkerVersion's resource name for a content ``digest`` (hex): ``<worker>-<12 hex>``."""
        return _join_name(self.worker, "-" + digest[:_DIGEST_CHARS])

    def worker_spec(self) -> dict[str, Any]:
        """The ModuleWorker 0.3.0 spec: ``{}`` or ``{"description": …}`` (docs/spec/worker-forms.md#wf-worker)."""
        return {} if self.description is None else {"description": self.description}


@dataclass(frozen=True)
class Project:
    """A deployable directory: its ``manifest`` and ``modules`` (relative path → source text)."""

    manifest: Manifest
    modules: dict[str, str] = field(hash=False)


def _join_name(base: str, suffix: str) -> str:
    # A resource name ends in [a-z0-9]; trimming may expose a '-', so strip it before the suffix.
    return base[: _MAX_NAME - len(suffix)].rstrip("-") + suffix


#: Checks a trigger's cron expression: ``None`` when valid, else the reason (the host's parser,
#: ``core.cron``, is not importable here: ``host_cli.manifest`` passes it).
CronCheck = Callable[[str], "str | None"]


def load(directory: str | pathlib.Path, *, check_cron: CronCheck | None = None) -> Manifest:
    """Read and parse ``directory/takohost.toml`` (``check_cron``: as :func:`parse`).

    Raises:
        ManifestError: the file is missing, unreadable, not UTF-8 TOML, or breaks the schema.
    """
    path = pathlib.Path(directory) / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            "", f"not found: {path} (every deployable directory needs one)", source=str(path)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError("", f"cannot read {path}: {exc}", source=str(path)) from None
    return parse(text, source=str(path), check_cron=check_cron)


def load_project(directory: str | pathlib.Path, *, check_cron: CronCheck | None = None) -> Project:
    """:func:`load` the manifest and :func:`collect_modules`; checks that ``main`` is a module.

    Raises:
        ManifestError: as :func:`load` and :func:`collect_modules`, or ``worker.main`` names no file.
    """
    manifest = load(directory, check_cron=check_cron)
    modules = collect_modules(directory)
    if manifest.main not in modules:
        raise ManifestError(
            "worker.main",
            f"{manifest.main!r} is not among the directory's .py files ({', '.join(sorted(modules))})",
        )
    return Project(manifest=manifest, modules=modules)


def parse(text: str, *, source: str = MANIFEST_FILE, check_cron: CronCheck | None = None) -> Manifest:
    """Parse the text of a ``takohost.toml`` (pure; ``source`` only labels error messages;
    ``check_cron`` validates trigger expressions, ``None``: not checked here).

    Raises:
        ManifestError: TOML syntax, unknown keys, missing or mistyped values, names that break
            the resource/class/var rules (docs/spec/http-api.md#api-res, docs/spec/worker-forms.md#wf-version, docs/spec/durable-workflow.md), a ``[vars]`` table that
            is not a document (docs/spec/durable-workflow.md#dw-doc), an invalid cron expression (docs/spec/cron-trigger.md), duplicate
            names, or a binding named like a var.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError("", f"not valid TOML: {exc}", source=source) from None
    try:
        return _parse_document(data, check_cron)
    except ManifestError as exc:
        raise ManifestError(exc.where, exc.message, source=source) from None


def _parse_document(data: dict[str, Any], check_cron: CronCheck | None) -> Manifest:
    _closed(data, _TOP_KEYS, where="")
    worker = data.get("worker")
    if not isinstance(worker, dict):
        raise ManifestError("worker", "a [worker] table with at least `name` is required")
    if "requirements" in worker:
        raise ManifestError(
            "worker.requirements", "`requirements = [...]` belongs at the top of the file, before [worker]"
        )
    _closed(worker, _WORKER_KEYS, where="worker")
    requirements = _requirements(data.get("requirements", []))
    name = _resource_name(worker, "name", where="worker")
    main = _string(worker, "main", where="worker", default="main.py")
    if identifiers.MODULE_NAME_RE.match(main) is None:
        raise ManifestError("worker.main", f"{main!r} is not a module file name like main.py or pkg/main.py")
    description = _string(worker, "description", where="worker", default=None)
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise ManifestError("worker.description", f"at most {MAX_DESCRIPTION} characters")
    variables = _variables(data.get("vars", {}))
    workflows = tuple(
        _workflow(entry, f"workflows[{i}]")
        for i, entry in enumerate(_array_of_tables(data, "workflows"), start=1)
    )
    triggers = tuple(
        _trigger(entry, f"triggers[{i}]", check_cron)
        for i, entry in enumerate(_array_of_tables(data, "triggers"), start=1)
    )
    manifest = Manifest(
        worker=name,
        main=main,
        description=description,
        variables=variables,
        workflows=workflows,
        triggers=triggers,
        requirements=requirements,
    )
    _check_unique(manifest)
    return manifest


def _requirements(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ManifestError("requirements", "must be an array of strings like \"requests==2.32.3\"")
    try:
        pins.parse_requirements(value)
    except pins.RequirementError as exc:
        where = "requirements" if exc.index is None else f"requirements[{exc.index + 1}]"
        raise ManifestError(where, exc.message) from None
    return tuple(value)


def _closed(table: dict[str, Any], allowed: frozenset[str], *, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        place = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ManifestError(place, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _string(table: dict[str, Any], key: str, *, where: str, default: Any = ...) -> Any:
    if key not in table:
        if default is ...:
            raise ManifestError(f"{where}.{key}", "is required")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise ManifestError(f"{where}.{key}", f"must be a string, not {type(value).__name__}")
    return value


def _resource_name(table: dict[str, Any], key: str, *, where: str) -> str:
    value = _string(table, key, where=where)
    if identifiers.RESOURCE_NAME_RE.match(value) is None:
        raise ManifestError(
            f"{where}.{key}",
            f"{value!r} is not a resource name: 1-63 characters of "
            "a-z, 0-9 and '-', starting and ending with a letter or digit",
        )
    return value


def _variables(table: object) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ManifestError("vars", "must be a table")
    for name in table:
        if identifiers.VAR_NAME_RE.match(name) is None:
            raise ManifestError(f"vars.{name}", "var names must match ^[A-Z_][A-Z0-9_]*$")
    try:
        documents.canonical_document(table, allow_none=False, max_depth=documents.VARS_MAX_DEPTH)
    except documents.InvalidDocument as exc:
        pointer = exc.pointer.lstrip("/").replace("/", ".")
        raise ManifestError(
            f"vars.{pointer}" if pointer else "vars", f"not a JSON document value: {exc.message}"
        ) from None
    except documents.DocumentTooLargeError as exc:
        raise ManifestError("vars", str(exc)) from None
    return dict(table)


def _array_of_tables(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = data.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ManifestError(key, f"must be an array of tables ([[{key}]])")
    return entries


def _workflow(entry: dict[str, Any], where: str) -> WorkflowDecl:
    _closed(entry, _WORKFLOW_KEYS, where=where)
    name = _resource_name(entry, "name", where=where)
    class_name = _string(entry, "class", where=where)
    if identifiers.CLASS_NAME_RE.match(class_name) is None or "$" in class_name:
        # '$' is allowed by the Form but no Python class can be found by it (docs/spec/durable-workflow.md#dw-abi).
        raise ManifestError(
            f"{where}.class",
            f"{class_name!r} is not a Python class name (1-64 "
            "characters of letters, digits and '_', not starting with a digit)",
        )
    binding = _string(entry, "binding", where=where, default=None)
    if binding is not None and identifiers.VAR_NAME_RE.match(binding) is None:
        raise ManifestError(
            f"{where}.binding", f"{binding!r} must match ^[A-Z_][A-Z0-9_]*$ (it becomes env.{binding})"
        )
    return WorkflowDecl(name=name, class_name=class_name, binding=binding)


def _trigger(entry: dict[str, Any], where: str, check_cron: CronCheck | None) -> TriggerDecl:
    _closed(entry, _TRIGGER_KEYS, where=where)
    name = _resource_name(entry, "name", where=where)
    expression = _string(entry, "cron", where=where)
    problem = None if check_cron is None else check_cron(expression)
    if problem is not None:
        raise ManifestError(f"{where}.cron", f"{expression!r}: {problem}")
    return TriggerDecl(name=name, cron=expression)


def _check_unique(manifest: Manifest) -> None:
    seen: dict[str, str] = {manifest.worker: "worker.name", manifest.deployment_name: "the Deployment"}
    families: tuple[tuple[str, tuple[WorkflowDecl | TriggerDecl, ...]], ...] = (
        ("workflows", manifest.workflows),
        ("triggers", manifest.triggers),
    )
    for kind, entries in families:
        for i, entry in enumerate(entries, start=1):
            where = f"{kind}[{i}].name"
            if entry.name in seen:
                raise ManifestError(
                    where,
                    f"{entry.name!r} is already used by {seen[entry.name]}; "
                    "resource names are unique per Space across all Forms",
                )
            seen[entry.name] = where
    bindings: dict[str, str] = {}
    for i, workflow in enumerate(manifest.workflows, start=1):
        if workflow.binding is None:
            continue
        where = f"workflows[{i}].binding"
        if workflow.binding in manifest.variables:
            raise ManifestError(where, f"{workflow.binding!r} is also a var; env names must be distinct")
        if workflow.binding in bindings:
            raise ManifestError(
                where, f"{workflow.binding!r} is already used by {bindings[workflow.binding]}"
            )
        bindings[workflow.binding] = where


def collect_modules(directory: str | pathlib.Path) -> dict[str, str]:
    """Read every ``.py`` file under ``directory``: relative ``/`` path → UTF-8 source text.

    Hidden directories/files (``.name``) and ``__pycache__`` are skipped. Checks docs/spec/worker-forms.md#wf-version:
    1–64 files, names like ``main.py`` or ``pkg/mod.py``, each ≤ 1 MiB and ≤ 4 MiB in total.

    Raises:
        ManifestError: (``where`` = ``"modules"`` or the file's path) when a rule is broken or a
            file is not UTF-8.
    """
    root = pathlib.Path(directory)
    modules: dict[str, str] = {}
    total = 0
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if (
            any(part.startswith(".") or part == "__pycache__" for part in relative.parts)
            or not path.is_file()
        ):
            continue
        name = relative.as_posix()
        if identifiers.MODULE_NAME_RE.match(name) is None:
            raise ManifestError(
                name,
                "module paths must look like main.py or pkg/mod.py (letters, "
                "digits, '_'; not starting with a digit)",
                source=str(root),
            )
        raw = path.read_bytes()
        if len(raw) > MAX_MODULE_BYTES:
            raise ManifestError(
                name, f"{len(raw)} bytes; a module may have at most {MAX_MODULE_BYTES}", source=str(root)
            )
        try:
            modules[name] = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(name, f"not UTF-8 text: {exc}", source=str(root)) from None
        total += len(raw)
    if not modules:
        raise ManifestError("modules", "no .py files found", source=str(root))
    if len(modules) > MAX_MODULES:
        raise ManifestError(
            "modules", f"{len(modules)} .py files; a Version may hold at most {MAX_MODULES}", source=str(root)
        )
    if total > MAX_TOTAL_BYTES:
        raise ManifestError(
            "modules",
            f"{total} bytes of code; a Version may hold at most {MAX_TOTAL_BYTES}",
            source=str(root),
        )
    return modules


def content_digest(value: object) -> str:
    """SHA-256 hex digest of ``value``'s canonical JSON (sorted keys, ASCII): names and keys
    derived from content (Version names, deploy ``Idempotency-Key`` values)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
