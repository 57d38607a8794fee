"""The layers directory on this machine (docs/packages.md "On disk").

::

    TAKOHOST_PACKAGE_DIR/
      secret      0600  random bytes naming the layers (never mounted)
      layers/     0311  mounted read-only at /.takohost-packages in every context: a context may
                        open the layer its job names, never list the directory
        <name>/   0555  one layer: what pip installed, .pyc files, takohost-layer.json (files 0444)
      staging/    0700  installs in progress (and layers being removed), never mounted
      index/      0700  one file per layer present here, named by its name, holding its key

A layer's directory name is ``HMAC-SHA256(secret, key)``: a Space knows the name of its own
layers (its ``sys.path`` shows it) but cannot compute another set's, and the directory cannot be
listed, so another Space's layer is neither found nor read. The sweep lists ``index/``, never
``layers/``. A layer appears by one ``rename`` of a finished directory (never half-written) and
disappears by one ``rename`` out of ``layers/`` before it is deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator

__all__ = [
    "METADATA_FILE",
    "discard",
    "install_lock",
    "layer_name",
    "layer_path",
    "layers_root",
    "local_keys",
    "prepare",
    "publish",
    "read_metadata",
    "remove",
    "staging_dir",
]

#: The file in each layer that records what it holds (``{"key", "requirements", "packages",
#: "sizeBytes"}``); not importable, readable by the Versions that use the layer.
METADATA_FILE = "takohost-layer.json"
LAYERS_MODE = 0o311
PRIVATE_MODE = 0o700


def prepare(package_dir: str) -> str:
    """Create the directory tree (idempotent) with its modes; returns the layers root, the
    directory the sandbox mounts. Raises ``OSError``."""
    os.makedirs(package_dir, mode=PRIVATE_MODE, exist_ok=True)
    for sub in ("staging", "index"):
        path = os.path.join(package_dir, sub)
        os.makedirs(path, mode=PRIVATE_MODE, exist_ok=True)
        os.chmod(path, PRIVATE_MODE)
    root = layers_root(package_dir)
    os.makedirs(root, exist_ok=True)
    os.chmod(root, LAYERS_MODE)
    _secret(package_dir)
    return root


def layers_root(package_dir: str) -> str:
    """``package_dir/layers``: the directory every context sees at ``mounts.PACKAGE_MOUNT``."""
    return os.path.join(package_dir, "layers")


def staging_dir(package_dir: str) -> str:
    """``package_dir/staging``: where installs happen before they are published."""
    return os.path.join(package_dir, "staging")


def _secret(package_dir: str) -> bytes:
    """The machine's secret (created on first use: written aside, then linked into place, so a
    reader never sees it half-written and two creators agree on one)."""
    path = os.path.join(package_dir, "secret")
    if not os.path.exists(path):
        aside = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        finally:
            os.unlink(aside)
    with open(path) as source:
        value = source.read().strip()
    if len(value) != 64:
        raise OSError(f"{path} is not a secret this host wrote")
    return bytes.fromhex(value)


def layer_name(package_dir: str, key: str) -> str:
    """The directory name of layer ``key`` on this machine (40 hex digits, unguessable without
    the secret)."""
    return hmac.new(_secret(package_dir), key.encode("ascii"), hashlib.sha256).hexdigest()[:40]


def layer_path(package_dir: str, key: str) -> str:
    """The host path of layer ``key`` (it may not exist)."""
    return os.path.join(layers_root(package_dir), layer_name(package_dir, key))


def read_metadata(path: str) -> dict | None:
    """The :data:`METADATA_FILE` of the layer at ``path``, or ``None`` when there is none."""
    try:
        with open(os.path.join(path, METADATA_FILE), encoding="utf-8") as source:
            return json.load(source)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def install_lock(package_dir: str, key: str) -> Iterator[None]:
    """Hold this machine's lock of layer ``key`` (``flock``; released when the holder dies), so
    that two processes never install the same layer at once: the second finds it published."""
    path = os.path.join(staging_dir(package_dir), f"{key}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_only(top: str) -> None:
    """Directories 0555, files 0444 (executable bits dropped: nothing in a layer is run as a
    program); symbolic links are left alone (they cannot point outside a read-only mount's
    meaning: the sandbox sees only its own root)."""
    for parent, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, 0o444)
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, 0o555)
    os.chmod(top, 0o555)


def _writable(top: str) -> None:
    os.chmod(top, 0o700)
    for parent, dirs, _files in os.walk(top):
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)


def publish(package_dir: str, key: str, staged: str, metadata: dict) -> str:
    """Make the finished install ``staged`` (a directory under ``staging/``) the layer ``key``:
    write its metadata, make it read-only, record it in ``index/`` and rename it into
    ``layers/``; returns the layer's host path. When the layer exists already (installed
    meanwhile), ``staged`` is removed and the existing layer kept."""
    target = layer_path(package_dir, key)
    with open(os.path.join(staged, METADATA_FILE), "w", encoding="utf-8") as out:
        json.dump(metadata, out, sort_keys=True)
    _read_only(staged)
    index = os.path.join(package_dir, "index", os.path.basename(target))
    with open(index, "w", encoding="ascii") as out:
        out.write(key)
    try:
        os.rename(staged, target)
    except OSError:
        if not os.path.isdir(target):
            raise
        discard(staged)
    return target


def discard(path: str) -> None:
    """Delete a (possibly read-only) directory tree; missing is fine."""
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError):
        _writable(path)
    shutil.rmtree(path, ignore_errors=True)


def remove(package_dir: str, key: str) -> bool:
    """Delete layer ``key`` from this machine: renamed out of ``layers/`` first (a context can
    no longer open it), then deleted; returns whether it existed."""
    target = layer_path(package_dir, key)
    index = os.path.join(package_dir, "index", os.path.basename(target))
    existed = os.path.isdir(target)
    if existed:
        trash = tempfile.mkdtemp(prefix="removing-", dir=staging_dir(package_dir))
        moved = os.path.join(trash, "layer")
        os.rename(target, moved)
        discard(trash)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(index)
    return existed


def local_keys(package_dir: str) -> list[str]:
    """The keys of the layers present on this machine (from ``index/``)."""
    directory = os.path.join(package_dir, "index")
    keys = []
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in sorted(entries):
        try:
            with open(os.path.join(directory, name), encoding="ascii") as source:
                key = source.read().strip()
        except OSError:
            continue
        if len(key) == 64 and stat.S_ISREG(os.stat(os.path.join(directory, name)).st_mode):
            keys.append(key)
    return keys
