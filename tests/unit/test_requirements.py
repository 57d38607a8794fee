"""A WorkerVersion's ``requirements`` (docs/spec/worker-forms.md#wf-version; docs/spec/host-features.md#hf-real-work): the pure pin rules shared
by the API schema, ``takohost.toml`` and the installer (``takohost.domain.requirements``)."""

from __future__ import annotations

import copy

import pytest

from host_api import schemas
from host_cli import manifest
from models.errors import DomainError
from takohost.domain import requirements as pins

HASH = "a" * 64
OTHER = "B" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("requests==2.32.3", pins.Pin("requests", "2.32.3")),
        ("Pydantic_Core==2.23.4", pins.Pin("pydantic-core", "2.23.4")),
        ("zope.interface==7.0", pins.Pin("zope-interface", "7.0")),
        ("foo==1.0rc1", pins.Pin("foo", "1.0rc1")),
        ("foo==2!1.0.post2.dev3", pins.Pin("foo", "2!1.0.post2.dev3")),
        (
            f"foo==1.0 --hash=sha256:{OTHER} --hash=sha256:{HASH}",
            pins.Pin("foo", "1.0", (HASH, OTHER.lower())),
        ),
        ("  foo==1.0  ", pins.Pin("foo", "1.0")),
    ],
)
def test_pins_parse_normalised(text: str, expected: pins.Pin) -> None:
    assert pins.parse_pin(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("requests", "pinned exactly"),
        ("requests>=2.0", "pinned exactly"),
        ("requests~=2.0", "pinned exactly"),
        ("requests==2.*", "not an exact PEP 440 version"),
        ("requests==2.0+local", "not an exact PEP 440 version"),
        ("requests===2.0", "not ==="),
        ("requests[socks]==2.32.3", "extras are not supported"),
        ("requests==2.32.3; python_version>'3'", "markers and URLs"),
        ("requests @ https://example.com/r.whl", "pinned exactly"),
        ("requests==2.32.3 --hash=md5:abc", "--hash=sha256"),
        ("requests==2.32.3 --hash=sha256:abc", "--hash=sha256"),
        ("requests==2.32.3 --index-url=http://evil/", "--hash=sha256"),
        ("-r other.txt", "does not start with a package name"),
        ("--extra-index-url=http://evil/", "does not start with a package name"),
        ("", "does not start with a package name"),
    ],
)
def test_anything_but_an_exact_pin_is_refused_naming_why(text: str, fragment: str) -> None:
    with pytest.raises(pins.RequirementError) as info:
        pins.parse_pin(text)
    assert fragment in info.value.message


def test_a_pin_is_a_string_of_bounded_length() -> None:
    with pytest.raises(pins.RequirementError, match="must be a string"):
        pins.parse_pin(3)
    with pytest.raises(pins.RequirementError, match="at most 1024"):
        pins.parse_pin("a" * 1020 + "==1.0")


def test_the_list_is_bounded_and_names_are_distinct_after_normalisation() -> None:
    assert len(pins.parse_requirements([f"p{i}==1.0" for i in range(64)])) == 64
    with pytest.raises(pins.RequirementError, match="at most 64"):
        pins.parse_requirements([f"p{i}==1.0" for i in range(65)])
    with pytest.raises(pins.RequirementError, match="typing-extensions is pinned twice") as info:
        pins.parse_requirements(["typing_extensions==4.12.2", "attrs==24.2.0", "Typing.Extensions==4.0"])
    assert info.value.index == 2
    with pytest.raises(pins.RequirementError, match="must be a list"):
        pins.parse_requirements("requests==2.32.3")
    assert pins.parse_requirements([]) == ()


def test_the_layer_key_is_the_set_not_its_spelling_or_order() -> None:
    a = pins.parse_requirements(["Requests==2.32.3", "idna==3.10"])
    b = pins.parse_requirements(["idna==3.10", "requests==2.32.3"])
    key = pins.layer_key(a, interpreter="cpython-311-x86_64")
    assert key == pins.layer_key(b, interpreter="cpython-311-x86_64")
    assert len(key) == 64 and int(key, 16) >= 0
    assert key != pins.layer_key(a, interpreter="cpython-312-x86_64")
    assert key != pins.layer_key(
        pins.parse_requirements(["requests==2.32.2", "idna==3.10"]), interpreter="cpython-311-x86_64"
    )
    hashed = pins.parse_requirements([f"requests==2.32.3 --hash=sha256:{HASH}", "idna==3.10"])
    assert key != pins.layer_key(hashed, interpreter="cpython-311-x86_64")
    assert pins.canonical_lines(hashed) == ("idna==3.10", f"requests==2.32.3 --hash=sha256:{HASH}")


VERSION = {
    "worker": {"resourceUid": "00000000-0000-4000-8000-000000000001"},
    "mainModule": "main.py",
    "modules": {"main.py": "import requests\n"},
}
URL = "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/"


def version_body(requirements: object) -> dict:
    spec = copy.deepcopy(VERSION)
    spec["requirements"] = requirements
    return {"form": URL, "name": "v", "spec": spec}


def test_the_version_schema_accepts_pins() -> None:
    result = schemas.validate_create(version_body(["requests==2.32.3", f"idna==3.10 --hash=sha256:{HASH}"]))
    assert result.spec["requirements"] == ["requests==2.32.3", f"idna==3.10 --hash=sha256:{HASH}"]
    assert "requirements" not in schemas.validate_create({"form": URL, "name": "v", "spec": VERSION}).spec


@pytest.mark.parametrize(
    ("requirements", "pointer", "fragment"),
    [
        (["requests==2.32.3", "requests>=2"], "/spec/requirements/1", "pinned exactly"),
        (["requests==2.32.3", "Requests==2.32.3"], "/spec/requirements/1", "pinned twice"),
        ([f"p{i}==1" for i in range(65)], "/spec/requirements", "64"),
        ([3], "/spec/requirements/0", "string"),
        ("requests==2.32.3", "/spec/requirements", "list"),
        (None, "/spec/requirements", "null"),
    ],
)
def test_the_version_schema_refuses_bad_pins_with_a_pointer(
    requirements: object, pointer: str, fragment: str
) -> None:
    with pytest.raises(DomainError) as info:
        schemas.validate_create(version_body(requirements))
    assert info.value.code == "invalid_spec"
    assert info.value.details["pointer"] == pointer
    assert fragment.lower() in str(info.value.details["errors"]).lower()


def test_takohost_toml_reads_top_level_requirements() -> None:
    m = manifest.parse('requirements = ["requests==2.32.3"]\n[worker]\nname = "orders"\n')
    assert m.requirements == ("requests==2.32.3",)
    assert manifest.parse('[worker]\nname = "orders"\n').requirements == ()


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ('requirements = ["requests>=2"]\n[worker]\nname = "o"\n', "requirements[1]", "pinned exactly"),
        ('requirements = "requests==2.32.3"\n[worker]\nname = "o"\n', "requirements", "array of strings"),
        ('requirements = ["a==1", "A==2"]\n[worker]\nname = "o"\n', "requirements[2]", "pinned twice"),
        ('[worker]\nname = "o"\nrequirements = ["a==1"]\n', "worker.requirements", "top of the file"),
    ],
)
def test_takohost_toml_refuses_bad_requirements(text: str, where: str, fragment: str) -> None:
    with pytest.raises(manifest.ManifestError) as info:
        manifest.parse(text)
    assert info.value.where == where
    assert fragment in info.value.message
