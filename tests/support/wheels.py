"""Tiny wheels and sdists built in a test, for a local wheelhouse (docs/packages.md; issue 23
item 11): no registry, no build backend. A wheel is a zip with a ``.dist-info`` directory whose
``RECORD`` lists every file with its SHA-256 (the wheel format, PEP 427)."""

from __future__ import annotations

import base64
import hashlib
import io
import pathlib
import tarfile
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
