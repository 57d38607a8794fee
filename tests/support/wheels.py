"""Tiny wheels and sdists built in a test, for a local wheelhouse (docs/packages.md; docs/spec/host-features.md#hf-real-work
item 11): no registry, no build backend. A wheel is a zip with a ``.dist-info`` directory whose
``RECORD`` lists every file with its SHA-256 (the wheel format, PEP 427)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import tarfile
import uuid
import zipfile


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(
    directory: str | pathlib.Path,
    *,
    name: str,
    version: str,
    files: dict[str, str],
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
) -> pathlib.Path:
    """Write ``{name}-{version}-{tag}.whl`` into ``directory`` holding ``files`` (path inside the
    wheel → text) and metadata that ``Requires-Dist`` each of ``requires``; returns its path."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    entries = dict(files)
    entries[f"{info}/METADATA"] = metadata
    entries[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: takohost-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    )
    record = [f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path, text in entries.items()]
    record.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = pathlib.Path(directory) / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, text in entries.items():
            archive.writestr(member, text)
    return path


def build_sdist(directory: str | pathlib.Path, *, name: str, version: str, setup_py: str) -> pathlib.Path:
    """Write ``{name}-{version}.tar.gz``, a source distribution whose ``setup.py`` is
    ``setup_py`` (code that would run on whoever builds it); returns its path."""
    base = f"{name.replace('-', '_')}-{version}"
    path = pathlib.Path(directory) / f"{base}.tar.gz"
    members = {
        f"{base}/setup.py": setup_py,
        f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    with tarfile.open(path, "w:gz") as archive:
        for member, text in members.items():
            data = text.encode()
            entry = tarfile.TarInfo(member)
            entry.size = len(data)
            archive.addfile(entry, io.BytesIO(data))
    return path


def wheel_from_installed(directory: str | pathlib.Path, name: str) -> pathlib.Path:
    """Repack the installed distribution ``name`` of this interpreter into a wheel in
    ``directory`` (its own files, ``.dist-info`` included, with its own tag), so that a test can
    serve a real package such as ``requests`` from a wheelhouse without any registry; returns
    its path. Compiled caches and files outside ``site-packages`` (scripts) are left out."""
    import importlib.metadata

    dist = importlib.metadata.distribution(name)
    wheel_text = dist.read_text("WHEEL") or ""
    tag = next(line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:"))
    base = pathlib.Path(dist.locate_file(""))
    entries: dict[str, bytes] = {}
    info_dir = None
    for member in dist.files or ():
        path = str(member)
        if ".." in member.parts or "__pycache__" in member.parts or path.endswith(".pyc"):
            continue
        if member.parts[0].endswith(".dist-info"):
            info_dir = member.parts[0]
            if member.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                continue
        entries[path] = (base / path).read_bytes()
    assert info_dir is not None, f"{name} has no .dist-info"
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in entries.items()]
    record.append(f"{info_dir}/RECORD,,")
    entries[f"{info_dir}/RECORD"] = ("\n".join(record) + "\n").encode()
    normalized = dist.metadata["Name"].replace("-", "_").replace(".", "_")
    path = pathlib.Path(directory) / f"{normalized}-{dist.version}-{tag}.whl"
    # Written aside and renamed into place: test files running side by side repack the same
    # distributions into the run's one wheelhouse while a worker's pip may be reading it.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for member_path, data in entries.items():
            archive.writestr(member_path, data)
    os.replace(partial, path)
    return path


#: ``requests`` and what it needs, as installed here (wheel_from_installed serves them offline).
REQUESTS_DISTRIBUTIONS = ("requests", "urllib3", "idna", "certifi", "charset-normalizer")


def requests_wheelhouse(directory: str | pathlib.Path) -> dict[str, str]:
    """Repack ``requests`` and its dependencies into ``directory``; returns name → version."""
    import importlib.metadata

    for name in REQUESTS_DISTRIBUTIONS:
        wheel_from_installed(directory, name)
    return {name: importlib.metadata.version(name) for name in REQUESTS_DISTRIBUTIONS}


def installed_closure(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` and every distribution they need, transitively, as this interpreter has them
    installed (``importlib.metadata``'s ``Requires-Dist``; a requirement whose marker does not
    hold here, an extra among them, is left out); in the order first met, each name once."""
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    pending = list(names)
    while pending:
        name = pending.pop(0)
        key = canonicalize_name(name)
        if key in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[key] = dist.metadata["Name"]
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return tuple(seen.values())


def wheelhouse_of(directory: str | pathlib.Path, names: tuple[str, ...]) -> dict[str, str]:
    """Repack ``names`` and everything they need (:func:`installed_closure`) into ``directory``
    with :func:`wheel_from_installed`; returns name → installed version, dependencies included."""
    import importlib.metadata

    closure = installed_closure(names)
    for name in closure:
        wheel_from_installed(directory, name)
    return {name: importlib.metadata.version(name) for name in closure}


#: The HTTP clients tenant code uses "the ordinary way" (docs/egress.md): what
#: :func:`http_clients_wheelhouse` serves, with their dependencies.
HTTP_CLIENT_DISTRIBUTIONS = ("requests", "httpx", "urllib3")


def http_clients_wheelhouse(directory: str | pathlib.Path) -> dict[str, str]:
    """Repack ``requests``, ``httpx`` and ``urllib3`` as installed here, and what they need
    (``httpcore``, ``h11``, ``anyio``, ``idna``, ``certifi``, ``charset-normalizer``, …), into
    ``directory``; returns name → version (pin the first three at these)."""
    return wheelhouse_of(directory, HTTP_CLIENT_DISTRIBUTIONS)
