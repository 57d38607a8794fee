"""The zygote's first code: makes the SDK importable under neutral names, then runs
``takohost.runtime.zygote`` (docs/spec/host-features.md#hf-neighbours: no host path in what a context inherits).

``workers.sandbox.Zygote.start`` runs this file through :func:`command` in an
interpreter started under the name ``takohost-sandbox``: its command line (``sys.orig_argv``,
``/proc/self/cmdline``) holds no host path, ``sys.executable`` is not the host's virtualenv, and
its code is named ``/takohost/sdk/takohost/runtime/boot.py`` (where a context has its copy; a
name such as ``/dev/fd/N`` would send ``linecache`` reading whatever descriptor N is later when a
traceback is formatted). The first line of its standard input is JSON ``{"packages": {name:
directory}}`` (:func:`package_dirs`): every module of those packages — the SDK and what it
imports beyond the standard library — is loaded from its directory on the host but named
``/takohost/sdk/<name>/…`` (``__file__``, ``__spec__``, every code object's ``co_filename``),
the place where each context finds its copy (``isolation.mounts``). Only the finder installed
here knows the host's directories; the zygote swaps the preloaded modules' loaders for plain ones
(``zygote._plain_loaders``) and each context drops the finder before any tenant code runs
(``isolation.forking.Forker.enter``). The rest of the standard input is the zygote's settings
(``zygote.read_settings``).

Standard library only, and no import of ``takohost`` before the finder is in place.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

#: Where every context (and the zygote's own modules) find the packages: ``/takohost/sdk/<name>``.
NEUTRAL_ROOT = "/takohost/sdk"
#: The packages a context imports beyond the standard library: the SDK and its dependencies.
PACKAGES = ("takohost", "rfc8785")


def package_dirs() -> dict[str, str]:
    """:data:`PACKAGES` → each one's directory on this host (called by the zygote's starter)."""
    dirs = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            raise ImportError(f"the sandbox needs the package {name}")
        dirs[name] = os.path.dirname(os.path.realpath(spec.origin))
    return dirs


def command(fd: int) -> str:
    """The ``-c`` code that runs this file, read from descriptor ``fd``, under its neutral name."""
    return f"import os;exec(compile(os.fdopen({fd}).read(),{NEUTRAL_ROOT + '/takohost/runtime/boot.py'!r},'exec'))"


class NeutralFinder:
    """Finds the modules of ``packages`` (name → directory on the host) and names them under
    :data:`NEUTRAL_ROOT`."""

    def __init__(self, packages: dict[str, str]) -> None:
        self.packages = packages

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """A spec with a neutral origin for a module of the packages, else ``None``."""
        parts = fullname.split(".")
        if parts[0] not in self.packages:
            return None
        neutral = "/".join([NEUTRAL_ROOT, *parts])
        for file, package in ((neutral + "/__init__.py", True), (neutral + ".py", False)):
            if os.path.isfile(self.to_real(file)):
                return importlib.util.spec_from_file_location(
                    fullname,
                    file,
                    loader=NeutralLoader(fullname, file, finder=self),
                    submodule_search_locations=[neutral] if package else None,
                )
        return None

    def to_real(self, path: str) -> str:
        """The host path of ``path`` (a neutral path; any other is returned unchanged)."""
        if path.startswith(NEUTRAL_ROOT + "/"):
            name, _, rest = path[len(NEUTRAL_ROOT) + 1 :].partition("/")
            if name in self.packages:
                return self.packages[name] + ("/" + rest if rest else "")
        return path


class NeutralLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose module and code carry the neutral path; reads the real files."""

    def __init__(self, fullname: str, path: str, *, finder: NeutralFinder) -> None:
        super().__init__(fullname, path)
        self.finder = finder

    def get_data(self, path: str) -> bytes:
        """The bytes of a neutral path's real file (source or cached bytecode)."""
        return super().get_data(self.finder.to_real(path))

    def path_stats(self, path: str) -> Mapping[str, Any]:
        """``mtime``/``size`` of a neutral path's real file (validates cached bytecode)."""
        return super().path_stats(self.finder.to_real(path))


def _first_line(fd: int) -> bytes:
    """One line of ``fd``, read a byte at a time: the rest is for the zygote."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def _main() -> int:
    import json

    sys.meta_path.insert(0, NeutralFinder(json.loads(_first_line(0))["packages"]))
    sys.argv[0] = "takohost-sandbox"
    from takohost.runtime import zygote

    return zygote.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_main())
