"""The Version's modules, imported from memory (:class:`SourceModules`), their compiled code as
frames carry it (:func:`code_blob`, :func:`code_of`; PROTOCOL.md "Compiled modules"), and the
import of a job's main module (:func:`import_version`, docs/spec/worker-forms.md#wf-loading).

Standard library and ``takohost`` only: this runs user code.
"""

from __future__ import annotations

import base64
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import re
import sys
import types
from collections.abc import Callable
from typing import Any

from takohost.domain import identifiers
from takohost.runtime import protocol, tracebacks

__all__ = [
    "PACKAGES_ROOT",
    "RESERVED_MODULES",
    "VIRTUAL_ROOT",
    "SourceModules",
    "add_packages",
    "code_blob",
    "code_of",
    "import_main",
    "import_version",
]

#: The directory holding package layers as this child sees it (set once by the zygote:
#: ``isolation.mounts.PACKAGE_MOUNT``, read-only, or the host's directory without isolation;
#: ``None``: no layers).
PACKAGES_ROOT: str | None = None
#: A job's ``packages``: the name of its Version's layer (``workers.packages.layers.layer_name``).
_LAYER_NAME = re.compile(r"[0-9a-f]{40}")

#: Where a Version's modules seem to live (``__file__``, tracebacks); no such directory exists.
VIRTUAL_ROOT = tracebacks.VIRTUAL_ROOT.rstrip("/")
# Top-level names a Version's modules may not replace: the SDK and runtime, the running main
# module, the codec registry (imported lazily by the interpreter) and built-in modules. Any other
# name shadows an already imported module of the same name, as a script's directory would.
RESERVED_MODULES = frozenset({"takohost", "__main__", "encodings"}) | frozenset(sys.builtin_module_names)


class SourceModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """A finder/loader serving a Version's ``modules`` (relative path → source text) from memory.

    ``"main.py"`` is module ``main``; ``"pkg/__init__.py"`` is package ``pkg``; ``"pkg/mod.py"`` is
    ``pkg.mod`` (a directory without ``__init__.py`` still works as an empty package).
    ``__file__`` is the virtual path ``/takohost/version/<path>``; tracebacks show the source.
    Raises ``ImportError`` for a path that is not a module path (docs/spec/worker-forms.md#wf-version) or that would
    replace a built-in module or ``takohost``.
    """

    def __init__(self, modules: dict[str, str], code: object = None) -> None:
        #: The job's compiled modules (module path → :func:`code_blob`; PROTOCOL.md "Compiled
        #: modules"); a blob that does not load is ignored and the source compiled instead.
        self._code: dict = code if type(code) is dict else {}
        #: Module path → the code object compiled here from source (for the ``code`` frame).
        self.compiled: dict[str, types.CodeType] = {}
        self._entries: dict[str, tuple[str, str, bool]] = {}
        for path, source in modules.items():
            if (
                type(path) is not str
                or identifiers.MODULE_NAME_RE.match(path) is None
                or type(source) is not str
            ):
                raise ImportError(f"invalid module path {protocol.safe_text(path, limit=300)!r}")
            parts = path[: -len(".py")].split("/")
            if parts[0] in RESERVED_MODULES:
                raise ImportError(f"module {parts[0]!r} is reserved by the host")
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
                if not parts:
                    raise ImportError("a top-level __init__.py is not a module")
            self._entries[".".join(parts)] = (f"{VIRTUAL_ROOT}/{path}", source, is_package)
            for depth in range(1, len(parts)):
                package = ".".join(parts[:depth])
                virtual = f"{VIRTUAL_ROOT}/{'/'.join(parts[:depth])}/__init__.py"
                self._entries.setdefault(package, (virtual, "", True))

    @staticmethod
    def module_name(path: str) -> str:
        """The dotted module name of a module path (``"pkg/mod.py"`` → ``"pkg.mod"``)."""
        parts = path[: -len(".py")].split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def install(self) -> None:
        """Put the finder first and forget any already-imported module of the same names."""
        tops = {name.split(".")[0] for name in self._entries}
        # Only the names already imported are looked for: listing every module name would write
        # to the page of each (reference counts), about 0.3 ms of copy-on-write faults in a
        # freshly forked child. A submodule is never imported without its top-level package.
        for top in tops:
            if top in sys.modules:
                prefix = top + "."
                for loaded in [name for name in sys.modules if name == top or name.startswith(prefix)]:
                    del sys.modules[loaded]
        # No importlib.invalidate_caches(): this finder is first on sys.meta_path and keeps no
        # cache, and no file appears on sys.path for the Version's modules.
        sys.meta_path.insert(0, self)

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        """Spec for one of the Version's modules, ``None`` for anything else."""
        entry = self._entries.get(fullname)
        if entry is None:
            return None
        virtual, _, is_package = entry
        spec = importlib.util.spec_from_loader(fullname, self, origin=virtual, is_package=is_package)
        assert spec is not None
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [virtual.rsplit("/", 1)[0]]
        return spec

    def load(self, fullname: str) -> Any:
        """Import top-level module ``fullname`` of the Version as ``importlib.import_module``
        would (``importlib.util.module_from_spec`` of the same spec, the same ``sys.modules``
        entry, removed again when its code raises; the result is what ``sys.modules`` holds after
        its code ran), without the import system's locks and searches: in a freshly forked child
        they cost about 0.2 ms (a microbenchmark of 300 forks). Raises what the module's code
        raises, or ``ImportError`` for a name that is not one of the Version's top-level
        modules."""
        spec = self.find_spec(fullname)
        if spec is None or "." in fullname:
            raise ImportError(f"no top-level module {fullname!r} in this Version", name=fullname)
        module = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = module
        try:
            self.exec_module(module)
        except BaseException:
            sys.modules.pop(fullname, None)
            raise
        return sys.modules.get(fullname, module)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """Default module creation."""
        return None

    def exec_module(self, module: Any) -> None:
        """Run the module's code in its namespace: what :meth:`compile_all` compiled, else the
        job's compiled code of it when it loads (and names this module's virtual file), else the
        source compiled here."""
        virtual, source, _ = self._entries[module.__spec__.name]
        path = virtual[len(VIRTUAL_ROOT) + 1 :]
        code = self.compiled.get(path) or self._loaded(path, virtual)
        if code is None:
            code = compile(source, virtual, "exec", dont_inherit=True)
            if source:
                self.compiled[path] = code
        exec(code, module.__dict__)  # noqa: S102

    def _loaded(self, path: str, virtual: str) -> types.CodeType | None:
        code = code_of(self._code.get(path))
        return code if code is not None and code.co_filename == virtual else None

    def compile_all(self) -> None:
        """Compile every module with source into :attr:`compiled` now (one that does not compile
        is left for its import to report, as before)."""
        for virtual, source, _ in self._entries.values():
            path = virtual[len(VIRTUAL_ROOT) + 1 :]
            if source and path not in self.compiled:
                try:
                    self.compiled[path] = compile(source, virtual, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    continue

    def code_frame(self, *, limit: int) -> dict[str, Any] | None:
        """The ``code`` frame of what was compiled here (``None``: nothing, or more than ``limit``
        base64 characters in all)."""
        if not self.compiled:
            return None
        blobs = {path: code_blob(code) for path, code in self.compiled.items()}
        if sum(len(blob) for blob in blobs.values()) > limit:
            return None
        return {"op": "code", "modules": blobs}

    def get_source(self, fullname: str) -> str:
        """The module's source text (used by ``linecache`` for tracebacks)."""
        entry = self._entries.get(fullname)
        if entry is None:
            raise ImportError(f"no module {fullname!r} in this Version", name=fullname)
        return entry[1]

    def is_package(self, fullname: str) -> bool:
        """True for ``__init__.py`` modules and implicit package directories."""
        entry = self._entries.get(fullname)
        if entry is None:
            raise ImportError(f"no module {fullname!r} in this Version", name=fullname)
        return entry[2]


def code_blob(code: types.CodeType) -> str:
    """A compiled module as frames carry it: base64 of this interpreter's magic number followed by
    the ``marshal`` data (PROTOCOL.md "Compiled modules")."""
    return base64.b64encode(importlib.util.MAGIC_NUMBER + marshal.dumps(code)).decode("ascii")


def code_of(blob: object) -> types.CodeType | None:
    """The code object of a :func:`code_blob`, or ``None`` for anything that is not one of this
    interpreter's (another magic number, bad base64 or marshal data, not a code object)."""
    if type(blob) is not str:
        return None
    try:
        raw = base64.b64decode(blob, validate=True)
        magic = importlib.util.MAGIC_NUMBER
        if not raw.startswith(magic):
            return None
        code = marshal.loads(raw[len(magic) :])
    except Exception:  # noqa: BLE001 - whatever it is, the source is compiled instead
        return None
    return code if type(code) is types.CodeType else None


def add_packages(job: dict[str, Any]) -> str | None:
    """Put the job's package layer (``packages``: its name) at the end of ``sys.path``, after the
    standard library (a package never shadows it) and behind the Version's own modules (served
    first, from memory); returns its path, ``None`` when the job names none. Raises
    ``ImportError`` when the name is malformed or the layer is not there."""
    name = job.get("packages")
    if name is None:
        return None
    if type(name) is not str or _LAYER_NAME.fullmatch(name) is None or PACKAGES_ROOT is None:
        raise ImportError("the Version's package layer is not available in this sandbox")
    path = os.path.join(PACKAGES_ROOT, name)
    if not os.path.isdir(path):
        raise ImportError("the Version's package layer is not installed on this host")
    if path not in sys.path:
        sys.path.append(path)
    return path


def import_version(
    job: dict[str, Any], *, compiled: Callable[[SourceModules], None] | None = None
) -> tuple[Any, SourceModules]:
    """Install the job's ``modules`` (with its compiled ``code``, if any) and import
    ``mainModule`` fresh: ``(module, finder)``; errors propagate. With ``compiled``, every
    module is compiled first and ``compiled(finder)`` called before any of the Version's code
    runs (what it then sees in ``finder.compiled`` is the source's, whatever that code does)."""
    finder = SourceModules(job.get("modules") or {}, job.get("code"))
    main = job.get("mainModule")
    if type(main) is not str or main not in (job.get("modules") or {}):
        raise ImportError(f"mainModule {protocol.safe_text(main, limit=300)!r} is not one of the modules")
    add_packages(job)
    if compiled is not None:
        finder.compile_all()
        compiled(finder)
    finder.install()
    name = SourceModules.module_name(main)
    if "." in name:  # its packages first: the import system's way
        return importlib.import_module(name), finder
    return finder.load(name), finder


def import_main(job: dict[str, Any]) -> Any:
    """:func:`import_version`'s module."""
    return import_version(job)[0]
