"""Install a pin set as one layer on this machine, with pip, running no code of the packages
(docs/spec/worker-forms.md#wf-version; docs/spec/host-features.md#hf-real-work; docs/packages.md).

pip is the resolver (``pip install --only-binary=:all: --target``): wheels only, so no build
backend, ``setup.py`` or build hook of a package ever runs; installing a wheel is unpacking a
zip (pip refuses members outside the target). Then the layer's ``.py`` files are compiled to
``.pyc`` (``compileall``: compiling runs nothing) in a subprocess with the same deadline, its size
is checked against the quota, it is made read-only and published by one rename
(``layers.publish``). pip runs isolated from the host's own pip configuration
(``PIP_CONFIG_FILE=/dev/null``, ``--isolated``), against ``TAKOHOST_WHEELHOUSE`` (``--no-index
--find-links``) or ``TAKOHOST_PACKAGE_INDEX_URL`` (default: pip's, PyPI), in a session of its own
killed whole at the deadline. Nothing is left behind by a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from takohost.domain import requirements as pins
from workers.packages import config, layers, resolve

__all__ = ["Layer", "install"]

#: Environment variables passed on to pip (how the host reaches its index; nothing else).
_PASSED_ENV = ("PATH", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


@dataclass(frozen=True)
class Layer:
    """An installed layer: ``key`` (its content address), ``path`` (on this host), ``name`` (its
    directory name: a job's ``packages``, found under ``/.takohost-packages`` in a context),
    ``requirements`` (canonical pin lines), ``packages``
    (``[{"name", "version", "sha256"}]`` as pip installed them), ``size_bytes``."""

    key: str
    path: str
    name: str
    requirements: tuple[str, ...]
    packages: tuple[dict, ...]
    size_bytes: int


def _layer(cfg: config.PackageConfig, key: str, path: str, metadata: dict) -> Layer:
    return Layer(
        key=key,
        path=path,
        name=os.path.basename(path),
        requirements=tuple(metadata.get("requirements") or ()),
        packages=tuple(metadata.get("packages") or ()),
        size_bytes=int(metadata.get("sizeBytes") or 0),
    )


def install(requirements: tuple[pins.Pin, ...], *, cfg: config.PackageConfig | None = None) -> Layer:
    """The layer of ``requirements`` on this machine, installed now unless it is there already.

    Raises:
        resolve.PackageError: ``package_not_found``, ``sdist_only``, ``no_wheel_for_platform``,
            ``conflict``, ``hash_mismatch``, ``layer_too_large`` or ``install_failed`` (the
            message names the package); nothing was published.
        OSError: the package directory cannot be written (a host problem).
    """
    cfg = cfg or config.current()
    if not requirements:
        raise ValueError("an empty pin set has no layer")
    key = pins.layer_key(requirements, interpreter=config.interpreter())
    layers.prepare(cfg.package_dir)
    path = layers.layer_path(cfg.package_dir, key)
    metadata = layers.read_metadata(path)
    if metadata is not None:
        return _layer(cfg, key, path, metadata)
    with layers.install_lock(cfg.package_dir, key):
        metadata = layers.read_metadata(path)  # installed by another process meanwhile
        if metadata is not None:
            return _layer(cfg, key, path, metadata)
        staged = tempfile.mkdtemp(prefix="install-", dir=layers.staging_dir(cfg.package_dir))
        try:
            metadata = _install_into(staged, requirements, key=key, cfg=cfg)
            path = layers.publish(cfg.package_dir, key, os.path.join(staged, "layer"), metadata)
        finally:
            layers.discard(staged)
    return _layer(cfg, key, path, layers.read_metadata(path) or metadata)


#: Address space of the compiling process: a hostile module built to exhaust the compiler's
#: memory fails to compile (it just gets no ``.pyc``) instead of taking the worker's machine.
COMPILE_MEMORY_BYTES = 2 * 1024 * 1024 * 1024


def _run(
    command: list[str], *, cwd: str, env: dict[str, str], deadline: float, memory_bytes: int | None = None
) -> subprocess.CompletedProcess:
    """Run ``command`` in a session of its own (``memory_bytes``: its ``RLIMIT_AS``, set right
    after it starts); at ``deadline`` (monotonic) kill the whole session and raise
    ``subprocess.TimeoutExpired``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise subprocess.TimeoutExpired(command, 0)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if memory_bytes is not None:
        with contextlib.suppress(OSError):  # it exited already
            resource.prlimit(process.pid, resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        out, err = process.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _install_into(
    staged: str, requirements: tuple[pins.Pin, ...], *, key: str, cfg: config.PackageConfig
) -> dict:
    deadline = time.monotonic() + cfg.timeout_s
    target = os.path.join(staged, "layer")
    report = os.path.join(staged, "report.json")
    listing = os.path.join(staged, "requirements.txt")
    lines = pins.canonical_lines(requirements)
    with open(listing, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    if cfg.wheelhouse:
        source = ["--no-index", "--find-links", cfg.wheelhouse]
    elif cfg.index_url:
        source = ["--index-url", cfg.index_url]
    else:
        source = []
    command = [
        sys.executable, "-m", "pip", "install",
        "--isolated", "--disable-pip-version-check", "--no-input", "--no-cache-dir",
        "--progress-bar", "off", "--no-warn-script-location",
        "--only-binary=:all:", "--ignore-installed", "--no-compile",
        "--target", target, "--report", report, *source, "-r", listing,
    ]  # fmt: skip
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env.update(
        {
            "HOME": staged,
            "TMPDIR": staged,
            "PIP_CONFIG_FILE": os.devnull,
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
        }
    )
    try:
        done = _run(command, cwd=staged, env=env, deadline=deadline)
    except subprocess.TimeoutExpired:
        raise resolve.PackageError(
            "install_failed",
            f"installing {', '.join(p.name for p in requirements)} did not finish within {cfg.timeout_s:g} s",
        ) from None
    if done.returncode != 0:
        # pip explains a conflict on standard output, its errors on standard error
        output = done.stdout + "\n" + done.stderr
        raise resolve.classify(output, index_url=cfg.index_url, wheelhouse=cfg.wheelhouse)
    with open(report, encoding="utf-8") as source_file:
        installed = _installed(json.load(source_file))
    _check_size(target, cfg=cfg)
    try:  # compiling runs none of their code; a file that does not compile just has no .pyc
        _run(
            [sys.executable, "-I", "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", target],
            cwd=staged,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            deadline=deadline,
            memory_bytes=COMPILE_MEMORY_BYTES,
        )
    except subprocess.TimeoutExpired:
        raise resolve.PackageError(
            "install_failed", f"compiling the layer did not finish within {cfg.timeout_s:g} s"
        ) from None
    size = _check_size(target, cfg=cfg)
    return {"key": key, "requirements": list(lines), "packages": installed, "sizeBytes": size}


def _installed(report: dict) -> list[dict]:
    """``[{"name", "version", "sha256"}]`` from pip's installation report; every one a wheel."""
    packages = []
    for item in report.get("install") or []:
        metadata = item.get("metadata") or {}
        info = item.get("download_info") or {}
        name = pins.normalize_name(str(metadata.get("name", "")))
        if not str(info.get("url", "")).endswith(".whl"):  # --only-binary makes this impossible
            raise resolve.PackageError("sdist_only", f"{name}: not a wheel", package=name)
        digest = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        packages.append({"name": name, "version": str(metadata.get("version", "")), "sha256": digest})
    return sorted(packages, key=lambda p: p["name"])


def _sizes(target: str) -> dict[str, int]:
    """Bytes per top-level entry of ``target`` (symbolic links count as nothing)."""
    sizes: dict[str, int] = {}
    for parent, _dirs, files in os.walk(target):
        top = os.path.relpath(parent, target).split(os.sep, 1)[0]
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                entry = name if top == "." else top
                sizes[entry] = sizes.get(entry, 0) + os.lstat(path).st_size
    return sizes


def _check_size(target: str, *, cfg: config.PackageConfig) -> int:
    sizes = _sizes(target)
    total = sum(sizes.values())
    if total > cfg.max_bytes:
        largest = max(sizes, key=sizes.__getitem__)
        package = _distribution_of(target, largest) or largest
        raise resolve.PackageError(
            "layer_too_large",
            f"the layer would be {total} bytes, over TAKOHOST_PACKAGE_LAYER_MAX_BYTES ({cfg.max_bytes}); "
            f"the largest part is {package} ({sizes[largest]} bytes)",
            package=package,
        )
    return total


def _distribution_of(target: str, entry: str) -> str | None:
    """The normalised name of the distribution whose RECORD lists top-level ``entry``."""
    for name in os.listdir(target):
        if not name.endswith(".dist-info"):
            continue
        try:
            with open(os.path.join(target, name, "RECORD"), encoding="utf-8") as record:
                if any(line.split("/", 1)[0].split(",", 1)[0] == entry for line in record):
                    return pins.normalize_name(name[: -len(".dist-info")].rsplit("-", 1)[0])
        except OSError:
            continue
    return None
