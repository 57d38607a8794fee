"""Why pip could not install a set of pins, as an error code naming the package
(docs/packages.md "Errors"). pip resolves; this module only reads what it printed and, when pip
says "no matching distribution", which files the index holds for that name, to tell an unknown
package or version from an sdist-only release and from wheels built for other platforms.

Nothing here downloads or builds a distribution: a listing is the index's PEP 503 page (or the
wheelhouse's file names), parsed with ``packaging``.
"""

from __future__ import annotations

import html.parser
import os
import re
import urllib.parse
from dataclasses import dataclass

import requests
from packaging import tags, utils

from takohost.domain import requirements as pins

__all__ = ["PYPI_SIMPLE", "Files", "PackageError", "classify", "list_files"]

PYPI_SIMPLE = "https://pypi.org/simple"
#: Seconds a listing may take (only when an install already failed).
LISTING_TIMEOUT_S = 10.0

CODES = (
    "package_not_found",
    "sdist_only",
    "no_wheel_for_platform",
    "conflict",
    "hash_mismatch",
    "layer_too_large",
    "install_failed",
)


class PackageError(Exception):
    """A pin set that cannot be installed: ``code`` (one of :data:`CODES`), ``package`` (the
    normalised name it is about, or ``None``) and ``message`` (names the package)."""

    def __init__(self, code: str, message: str, *, package: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.package = package


@dataclass(frozen=True)
class Files:
    """What an index holds for one name: ``wheels`` (``(version, compatible with this
    interpreter)``) and ``sdists`` (versions), versions as strings."""

    wheels: tuple[tuple[str, bool], ...] = ()
    sdists: tuple[str, ...] = ()


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.names.append(urllib.parse.unquote(href.split("#", 1)[0].rsplit("/", 1)[-1]))


def _page(index_url: str, name: str) -> list[str]:
    url = f"{index_url.rstrip('/')}/{name}/"
    if url.startswith("file://"):
        path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
        page = os.path.join(path, "index.html")
        if not os.path.exists(page):
            return os.listdir(path) if os.path.isdir(path) else []
        with open(page, encoding="utf-8", errors="replace") as source:
            text = source.read()
    else:
        answer = requests.get(url, timeout=LISTING_TIMEOUT_S, headers={"Accept": "text/html"})
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        text = answer.text
    parser = _Links()
    parser.feed(text)
    return parser.names


def list_files(name: str, *, index_url: str | None, wheelhouse: str | None) -> Files:
    """The distributions the configured source holds for ``name`` (normalised). Raises
    ``OSError``/``requests.RequestException`` when the index cannot be read."""
    names = os.listdir(wheelhouse) if wheelhouse else _page(index_url or PYPI_SIMPLE, name)
    supported = set(tags.sys_tags())
    wheels: list[tuple[str, bool]] = []
    sdists: list[str] = []
    for filename in names:
        try:
            if filename.endswith(".whl"):
                dist, version, _, file_tags = utils.parse_wheel_filename(filename)
                if dist == name:
                    wheels.append((str(version), bool(file_tags & supported)))
            elif filename.endswith((".tar.gz", ".zip")):
                dist, version = utils.parse_sdist_filename(filename)
                if dist == name:
                    sdists.append(str(version))
        except (utils.InvalidWheelFilename, utils.InvalidSdistFilename, ValueError):
            continue
    return Files(wheels=tuple(wheels), sdists=tuple(sdists))


_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_CONFLICT_LINE = re.compile(r"^\s+(\S+) \S+ depends on (\S+)", re.M)
_USER_REQUESTED = re.compile(r"^\s+The user requested (\S+)$", re.M)
_HASH_LINE = re.compile(r"^\s+(\S+?)==\S+ from ", re.M)
_FOR_REQ = re.compile(r"For req: (\S+?)\.?\s")
_HASH_MISSING = re.compile(r"^\s+(\S+?)==\S+ --hash=sha256:", re.M)


def _name_of(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    return pins.normalize_name(match.group(0)) if match else requirement


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith("ERROR:")]
    if lines:
        return lines[-1][len("ERROR:") :].strip()[:500]
    rest = stderr.strip().splitlines()
    return rest[-1][:500] if rest else "no output"


def classify(stderr: str, *, index_url: str | None, wheelhouse: str | None) -> PackageError:
    """The :class:`PackageError` for pip's failure output ``stderr`` (its standard output and
    error together; never raises)."""
    if "DO NOT MATCH THE HASHES" in stderr:
        names = sorted({_name_of(n) for n in _HASH_LINE.findall(stderr)})
        package = names[0] if names else None
        return PackageError(
            "hash_mismatch",
            f"{package or 'a package'}: the wheel's SHA-256 is not one of the pinned hashes",
            package=package,
        )
    if "Hashes are required in --require-hashes mode" in stderr:
        names = sorted({_name_of(n) for n in _HASH_MISSING.findall(stderr)})
        package = names[0] if names else None
        return PackageError(
            "hash_mismatch",
            f"{', '.join(names) or 'a dependency'}: once one pin has a --hash, every package "
            "installed needs a pin with its hash (pip's hash-checking mode)",
            package=package,
        )
    if "ResolutionImpossible" in stderr or "conflicting dependencies" in stderr:
        conflicted = {_name_of(a) for a, _ in _CONFLICT_LINE.findall(stderr)}
        conflicted |= {_name_of(b) for _, b in _CONFLICT_LINE.findall(stderr)}
        conflicted |= {_name_of(n) for n in _USER_REQUESTED.findall(stderr)}
        lines = [
            line.strip()
            for line in stderr.splitlines()
            if " depends on " in line or line.strip().startswith("The user requested")
        ]
        package = sorted(conflicted)[0] if conflicted else None
        return PackageError(
            "conflict",
            f"conflicting requirements of {', '.join(sorted(conflicted)) or 'the pins'}: "
            + "; ".join(lines)[:600],
            package=package,
        )
    match = _NO_MATCH.search(stderr)
    if match:
        return _no_match(match.group(1), index_url=index_url, wheelhouse=wheelhouse)
    named = _FOR_REQ.search(stderr)
    package = _name_of(named.group(1)) if named else None
    return PackageError(
        "install_failed",
        f"{package or 'the requirements'}: pip could not install it: {_last_error(stderr)}",
        package=package,
    )


def _no_match(requirement: str, *, index_url: str | None, wheelhouse: str | None) -> PackageError:
    name = _name_of(requirement)
    exact = requirement.split("==", 1)[1] if "==" in requirement and "," not in requirement else None
    source = "the wheelhouse" if wheelhouse else "the package index"
    try:
        files = list_files(name, index_url=index_url, wheelhouse=wheelhouse)
    except Exception:  # noqa: BLE001 - the listing only refines the message
        return PackageError("package_not_found", f"{requirement}: not found in {source}", package=name)

    def matches(version: str) -> bool:
        return exact is None or utils.canonicalize_version(version) == utils.canonicalize_version(exact)

    wheels = [(v, ok) for v, ok in files.wheels if matches(v)]
    sdists = [v for v in files.sdists if matches(v)]
    if not wheels and not sdists:
        known = sorted({v for v, _ in files.wheels} | set(files.sdists))
        if not known:
            return PackageError("package_not_found", f"{name}: no such package in {source}", package=name)
        return PackageError(
            "package_not_found",
            f"{requirement}: no such version in {source} (it has {', '.join(known[-10:])})",
            package=name,
        )
    if not wheels:
        return PackageError(
            "sdist_only",
            f"{requirement}: only a source distribution exists, and building one would run its code "
            "on the host; only wheels are installed",
            package=name,
        )
    if not any(ok for _, ok in wheels):
        return PackageError(
            "no_wheel_for_platform",
            f"{requirement}: no wheel of it is built for this host's Python and platform",
            package=name,
        )
    return PackageError(
        "install_failed", f"{requirement}: pip found no usable distribution (Requires-Python?)", package=name
    )
