"""Where a running ``takohost dev`` can be found (docs/spec/host-features.md#hf-console): ``DATA_DIR/dev.json``.

The dev supervisor writes ``{"pid", "url", "space", "databaseUrl"}`` there (``0600``, in the
``0700`` data dir, beside the token and the database password it already keeps) once its API
answers, and removes it when it stops. The client commands read it, with ``DATA_DIR/token``, when
neither ``--url``/``TAKOHOST_URL`` nor ``--token``/``TAKOHOST_TOKEN`` says where to go, so a new
terminal in the project's directory needs no ``export``; ``takohost token create`` reads
``databaseUrl`` to make a token for another Space in the dev stack. A file left by a supervisor
that was killed names a pid that is gone (or is another program): it is ignored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

__all__ = ["DEFAULT_DATA_DIR", "DevInfo", "find_running", "remove", "write"]

DEFAULT_DATA_DIR = ".takohost"
FILE = "dev.json"


@dataclasses.dataclass(frozen=True)
class DevInfo:
    """A running dev stack: its API ``url``, Space, token (``None`` when unreadable), database URL."""

    data_dir: pathlib.Path
    pid: int
    url: str
    space: str
    token: str | None
    database_url: str


def write(data_dir: pathlib.Path, *, url: str, space: str, database_url: str) -> None:
    """Write ``data_dir/dev.json`` for this process (mode ``0600``, replaced atomically)."""
    body = {"pid": os.getpid(), "url": url, "space": space, "databaseUrl": database_url}
    tmp = data_dir / f".{FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)
    os.replace(tmp, data_dir / FILE)


def remove(data_dir: pathlib.Path) -> None:
    """Remove ``data_dir/dev.json`` if this process wrote it."""
    path = data_dir / FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def find_running(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR) -> DevInfo | None:
    """The dev stack running on ``data_dir`` (relative to the current directory), or ``None``
    when none is: no ``dev.json``, an unreadable one, or its supervisor is gone."""
    root = pathlib.Path(data_dir)
    try:
        body = json.loads((root / FILE).read_text())
        pid, url, space, database_url = body["pid"], body["url"], body["space"], body["databaseUrl"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not _is_dev_supervisor(pid):
        return None
    try:
        token = (root / "token").read_text().strip() or None
    except OSError:
        token = None
    return DevInfo(data_dir=root, pid=pid, url=str(url), space=str(space), token=token,
                   database_url=str(database_url))


def _is_dev_supervisor(pid: int) -> bool:
    """``pid`` is alive and runs ``takohost dev`` (a recycled pid of another program is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"dev" in argv
