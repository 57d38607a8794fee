"""A WorkerVersion's ``requirements``: exact pins of third-party packages (docs/spec/worker-forms.md#wf-version; docs/spec/host-features.md#hf-real-work
items 7–8; docs/packages.md).

Pure and standard library only: the marshmallow schema (``host_api.schemas``), ``takohost deploy``
(``host_cli.manifest``) and the host's installer (``workers.packages``) share these rules, so a pin
the API accepts is exactly a pin the installer can hand to pip.

A pin is ``name==version``, optionally followed by one or more `` --hash=sha256:<64 hex>``
(pip's hash-checking syntax). Names are compared PEP 503-normalised (``Foo_Bar`` and ``foo-bar``
are one package: a second pin of it is refused); versions must be PEP 440 public versions. No
extras, markers, URLs, ranges or wildcards: what a Version imports is decided by its spec alone,
never by what an index serves tomorrow. At most :data:`MAX_REQUIREMENTS` pins.

The layer key (:func:`layer_key`) is the SHA-256 of the canonical pin set (normalised names,
sorted, hashes sorted) and of the interpreter the layer is built for: Versions with the same set
share one installed layer; the order and spelling of the pins do not matter.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "MAX_REQUIREMENTS",
    "Pin",
    "RequirementError",
    "canonical_lines",
    "layer_key",
    "normalize_name",
    "parse_pin",
    "parse_requirements",
]

MAX_REQUIREMENTS = 64
#: Longest pin line accepted (a name, a version and a few hashes fit well below it).
MAX_PIN_CHARS = 1024
#: Hashes one pin may carry (one per wheel file of that version, as pip allows).
MAX_HASHES = 16

#: PEP 508 distribution names: letters/digits, with ``.``, ``_``, ``-`` inside.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
#: PEP 440 public versions (the specification's own expression, without local versions).
_VERSION = (
    r"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?"
    r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
    r"(?:[-_.]?dev[-_.]?[0-9]*)?"
)
_PIN_RE = re.compile(
    rf"^({_NAME})==({_VERSION})((?:\s+--hash=sha256:[0-9a-fA-F]{{64}})*)\s*$", re.ASCII | re.IGNORECASE
)
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})", re.ASCII)
_NORMALIZE_RE = re.compile(r"[-_.]+")


class RequirementError(ValueError):
    """One pin (or the list) breaks a rule: ``index`` is the pin's position (``None``: the whole
    list), ``message`` says why, naming the package when it can be read."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index


@dataclass(frozen=True, order=True)
class Pin:
    """One exact pin: ``name`` PEP 503-normalised (``"pydantic-core"``), ``version`` as written
    (lower case), ``hashes`` the accepted SHA-256 digests of the wheel (lower-case hex, sorted;
    empty: any file of that version)."""

    name: str
    version: str
    hashes: tuple[str, ...] = ()

    def line(self) -> str:
        """The pin as one line of a pip requirements file: ``name==version [--hash=sha256:…]…``."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash=sha256:{h}" for h in self.hashes)])


def normalize_name(name: str) -> str:
    """PEP 503 normalised form of a distribution name (``"Foo__Bar.baz"`` → ``"foo-bar-baz"``)."""
    return _NORMALIZE_RE.sub("-", name).lower()


def parse_pin(text: object, *, index: int | None = None) -> Pin:
    """Parse one pin string (see the module docstring).

    Raises:
        RequirementError: not a string, too long, or not ``name==version [--hash=sha256:<hex>]…``
            (the message says which part is wrong).
    """
    if type(text) is not str:
        raise RequirementError("a requirement must be a string like 'requests==2.32.3'", index=index)
    if len(text) > MAX_PIN_CHARS:
        raise RequirementError(f"a requirement is at most {MAX_PIN_CHARS} characters", index=index)
    match = _PIN_RE.match(text.strip())
    if match is None:
        raise RequirementError(_why_not(text.strip()), index=index)
    hashes = tuple(sorted({h.lower() for h in _HASH_RE.findall(match.group(3))}))
    if len(hashes) > MAX_HASHES:
        raise RequirementError(f"{match.group(1)}: at most {MAX_HASHES} hashes per pin", index=index)
    return Pin(name=normalize_name(match.group(1)), version=match.group(2).lower(), hashes=hashes)


def _why_not(text: str) -> str:
    """A message saying what is wrong with a pin that does not parse."""
    head = re.match(rf"^({_NAME})", text, re.ASCII)
    name = head.group(1) if head else None
    rest = text[len(name) :] if name else text
    label = f"{name}: " if name else ""
    if not name:
        return f"{text[:80]!r} does not start with a package name"
    if rest.startswith("["):
        return f"{label}extras are not supported; pin the packages an extra would add instead"
    if rest.startswith("==="):
        return f"{label}use an exact pin name==version, not ==="
    if not rest.startswith("=="):
        return f"{label}must be pinned exactly, like {name}==1.2.3 (no ranges, markers or URLs)"
    if ";" in text or "@" in text:
        return f"{label}markers and URLs are not supported"
    version = rest[2:].split(None, 1)[0] if rest[2:].strip() else ""
    if not re.match(rf"^{_VERSION}$", version, re.ASCII | re.IGNORECASE):
        return f"{label}{version[:40]!r} is not an exact PEP 440 version (no wildcards or local versions)"
    return f"{label}after the version only ' --hash=sha256:<64 hex digits>' may follow"


def parse_requirements(values: object) -> tuple[Pin, ...]:
    """Parse a Version's ``requirements`` list into pins, in the given order.

    Raises:
        RequirementError: not a list, more than :data:`MAX_REQUIREMENTS` pins, a pin that does
            not parse (``index`` set), or a package pinned twice (names compared normalised).
    """
    if not isinstance(values, list | tuple):
        raise RequirementError("requirements must be a list of strings like 'requests==2.32.3'")
    if len(values) > MAX_REQUIREMENTS:
        raise RequirementError(f"at most {MAX_REQUIREMENTS} requirements, not {len(values)}")
    pins: list[Pin] = []
    seen: dict[str, int] = {}
    for index, value in enumerate(values):
        pin = parse_pin(value, index=index)
        if pin.name in seen:
            raise RequirementError(
                f"{pin.name} is pinned twice (requirements {seen[pin.name]} and {index})", index=index
            )
        seen[pin.name] = index
        pins.append(pin)
    return tuple(pins)


def canonical_lines(pins: tuple[Pin, ...] | list[Pin]) -> tuple[str, ...]:
    """The pins as sorted requirement-file lines (what a layer is built from and keyed by)."""
    return tuple(pin.line() for pin in sorted(pins))


def layer_key(pins: tuple[Pin, ...] | list[Pin], *, interpreter: str) -> str:
    """The content address of the layer of ``pins`` built for ``interpreter`` (for example
    ``"cpython-311-x86_64"``: wheels are per interpreter and machine): 64 hex digits."""
    text = "takohost-layer-1\n" + interpreter + "\n" + "\n".join(canonical_lines(pins))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
