"""Package layers attacked (docs/spec/host-features.md#hf-real-work; docs/packages.md "Security"): tenant code in the
real sandbox (a real zygote and child) tries to find, read and change another Space's layer and
its own; a malicious wheel tries to run code on the host when it is installed. Wheels are built
in the test (no registry).
"""

from __future__ import annotations

import json
import os
import zipfile

import pytest

from tests.support import wheels, workflows


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


@pytest.fixture()
def wheelhouse(tmp_path, monkeypatch):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    monkeypatch.setenv("TAKOHOST_WHEELHOUSE", str(house))
    return house


def _install(pins_list: list[str]):
    from takohost.domain import requirements as pins
    from workers.packages import installer

    return installer.install(pins.parse_requirements(pins_list))


def _import(zygote, source: str, *, packages: str | None):
    from workers.sandbox import validation

    return validation.validate_version(
        zygote=zygote,
        main_module="main.py",
        modules={"main.py": source},
        packages=packages,
        time_limit_seconds=20,
    )


PROBE = """
import json, os, hashlib
import tako_mine
report = {}
def attempt(label, fn):
    try:
        report[label] = ["ok", repr(fn())[:200]]
    except Exception as exc:
        report[label] = ["refused", type(exc).__name__]
root = "/.takohost-packages"
mine = os.path.dirname(os.path.dirname(tako_mine.__file__))
attempt("list root", lambda: os.listdir(root))
attempt("list parent", lambda: os.listdir(os.path.dirname(root)))
attempt("secret beside", lambda: open(root + "/../secret").read())
attempt("other by key", lambda: os.listdir(root + "/" + OTHER_KEY))
attempt("other by key prefix", lambda: os.listdir(root + "/" + OTHER_KEY[:40]))
attempt("other by name hash", lambda: os.listdir(root + "/" + hashlib.sha256(OTHER_KEY.encode()).hexdigest()[:40]))
attempt("write own layer", lambda: open(mine + "/tako_mine/__init__.py", "a").write("x"))
attempt("new file in own layer", lambda: open(mine + "/planted.py", "w").write("x"))
attempt("new layer", lambda: os.mkdir(root + "/" + "f" * 40))
attempt("chmod own layer", lambda: os.chmod(mine, 0o777))
attempt("chmod root", lambda: os.chmod(root, 0o777))
attempt("rename own layer", lambda: os.rename(mine, root + "/" + "e" * 40))
attempt("remount", lambda: __import__("ctypes").CDLL(None, use_errno=True).mount(None, root.encode(), None, 32 | 4096, None) or __import__("ctypes").get_errno())
attempt("read own layer", lambda: tako_mine.WORD)
open(REPORT, "w").write(json.dumps(report))
"""


def test_a_space_cannot_list_read_or_change_layers(zygote, wheelhouse, tmp_path) -> None:
    from takohost.domain import requirements as pins
    from workers.packages import config

    wheels.build_wheel(
        wheelhouse, name="tako-mine", version="1.0", files={"tako_mine/__init__.py": "WORD = 'mine'\n"}
    )
    wheels.build_wheel(
        wheelhouse, name="tako-theirs", version="1.0", files={"tako_theirs/__init__.py": "SECRET = 's3'\n"}
    )
    mine = _install(["tako-mine==1.0"])
    theirs = _install(["tako-theirs==1.0"])
    other_key = pins.layer_key(
        pins.parse_requirements(["tako-theirs==1.0"]), interpreter=config.interpreter()
    )
    assert other_key == theirs.key  # the attacker can compute the other set's key: it does not help
    report_path = tmp_path / "report.json"
    source = f"OTHER_KEY = {other_key!r}\nREPORT = {str(report_path)!r}\n" + PROBE
    outcome = _import(zygote, source, packages=mine.name)
    assert outcome.ok, outcome.message
    report = json.loads(report_path.read_text())
    assert report.pop("read own layer") == ["ok", "'mine'"]  # the probe really ran against its layer
    # "/" is the context's own root: the package directory's secret, index and staging are not in it.
    result, listing = report.pop("list parent")
    assert result == "ok" and ".takohost-packages" in listing
    assert not any(name in listing for name in ("'secret'", "'index'", "'staging'", "'layers'"))
    assert report.pop("remount") in (["ok", "-1"], ["refused", "OSError"])  # mount(2) fails: -1
    for label, (result, detail) in report.items():
        assert result == "refused", (label, detail)
    # Nothing changed on the host.
    assert not os.path.exists(os.path.join(mine.path, "planted.py"))
    with open(os.path.join(mine.path, "tako_mine", "__init__.py")) as source_file:
        assert source_file.read() == "WORD = 'mine'\n"
    # And a job naming the other Space's layer is the only way to it: the host builds jobs.
    assert _import(zygote, "import tako_theirs\n", packages=mine.name).message.startswith(
        "ModuleNotFoundError"
    )


def test_a_forged_layer_name_in_a_job_reaches_nothing(zygote) -> None:
    for forged in ("../../etc", "/etc", "0" * 40, "x" * 40, "a" * 39):
        outcome = _import(zygote, "x = 1\n", packages=forged)
        assert not outcome.ok and "package layer" in outcome.message, forged


def test_a_malicious_wheel_runs_nothing_on_the_host_at_install(wheelhouse, tmp_path, zygote) -> None:
    marker = tmp_path / "ran"
    payload = (
        "import os\n"
        f"open({str(marker)!r} + '-' + ('sandbox' if os.path.isdir('/.takohost-packages') else 'host'), 'w').write('x')\n"
    )
    # Import-time code, a .pth file (run by `site` in a site directory), a setup.py, a console
    # script and a build hook: none of it may run while the host installs and compiles the layer.
    wheels.build_wheel(
        wheelhouse,
        name="tako-evil",
        version="1.0",
        files={
            "tako_evil/__init__.py": payload,
            "tako_evil_hook.pth": "import tako_evil\n",
            "setup.py": payload,
            "tako_evil-1.0.data/scripts/tako-evil": "#!/bin/sh\n" + f"touch {marker}-script\n",
            "sitecustomize.py": payload,
            "usercustomize.py": payload,
        },
    )
    layer = _install(["tako-evil==1.0"])
    assert os.path.isfile(os.path.join(layer.path, "tako_evil_hook.pth"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran")) == []
    # The marker works: importing the package in the sandbox runs it there, and only there.
    outcome = _import(zygote, "import tako_evil\n", packages=layer.name)
    assert outcome.ok, outcome.message
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran")) == ["ran-sandbox"]


def test_a_wheel_writing_outside_its_layer_is_refused(wheelhouse, tmp_path, monkeypatch) -> None:
    from workers.packages import resolve

    path = wheelhouse / "tako_escape-1.0-py3-none-any.whl"
    info = "tako_escape-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("tako_escape/__init__.py", "")
        archive.writestr("../../../../escaped.txt", "x")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tako-escape\nVersion: 1.0\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    monkeypatch.setenv("TAKOHOST_PACKAGE_DIR", str(tmp_path / "packages"))  # of this test alone
    before = []
    with pytest.raises(resolve.PackageError) as raised:
        _install(["tako-escape==1.0"])
    assert (raised.value.code, raised.value.package) == ("install_failed", "tako-escape")
    assert "outside the target directory" in raised.value.message
    root = os.environ["TAKOHOST_PACKAGE_DIR"]
    assert os.listdir(os.path.join(root, "index")) == before
    assert [n for n in os.listdir(os.path.join(root, "staging")) if not n.endswith(".lock")] == before
    for parent in (os.environ["TAKOHOST_PACKAGE_DIR"], str(tmp_path), "/tmp"):
        assert not os.path.exists(os.path.join(parent, "escaped.txt"))
