"""How pip's failures become error codes naming the package (``workers.packages.resolve``;
docs/packages.md "Errors"), from pip's own output; the listing of a wheelhouse's file names."""

from __future__ import annotations

import pytest

from workers.packages import config, resolve

CONFLICT = """Processing ./wh/tako_app-1.0-py3-none-any.whl (from -r requirements.txt (line 1))
INFO: pip is looking at multiple versions of tako-app to determine which version is compatible.

The conflict is caused by:
    The user requested tako-greet==1.0
    tako-app 1.0 depends on tako-greet==2.0

ERROR: Cannot install -r requirements.txt (line 1) and tako-greet==1.0 because these package versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/
"""
MISMATCH = """ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.
    Tako_Greet==1.0 from file:///wh/tako_greet-1.0-py3-none-any.whl (from -r requirements.txt (line 1)):
        Expected sha256 aaaa
             Got        bbbb
"""
MISSING_HASH = """ERROR: Hashes are required in --require-hashes mode, but they are missing from some requirements.
    tako-greet==2.0 --hash=sha256:7129cba6d394391be9199e963a0634f1a9678333007e5180c5e16f72f9aacff7
"""
OUTSIDE = "ERROR: For req: tako-escape==1.0. The wheel '/wh/x.whl' has a file '../x' trying to install outside the target directory\n"


@pytest.mark.parametrize(
    ("output", "code", "package", "fragment"),
    [
        (CONFLICT, "conflict", "tako-app", "tako-app 1.0 depends on tako-greet==2.0"),
        (MISMATCH, "hash_mismatch", "tako-greet", "not one of the pinned hashes"),
        (MISSING_HASH, "hash_mismatch", "tako-greet", "hash-checking mode"),
        (OUTSIDE, "install_failed", "tako-escape", "outside the target directory"),
        ("ERROR: something new\n", "install_failed", None, "something new"),
        ("", "install_failed", None, "no output"),
    ],
)
def test_pip_output_is_classified(output: str, code: str, package: str | None, fragment: str) -> None:
    error = resolve.classify(output, index_url=None, wheelhouse=None)
    assert (error.code, error.package) == (code, package)
    assert fragment in error.message


def _no_match(name: str, version: str) -> str:
    return (
        f"ERROR: Could not find a version that satisfies the requirement {name}=={version} (from versions: none)\n"
        f"ERROR: No matching distribution found for {name}=={version}\n"
    )


@pytest.mark.parametrize(
    ("name", "version", "code", "fragment"),
    [
        ("tako-nope", "1.0", "package_not_found", "no such package"),
        ("tako-greet", "3.0", "package_not_found", "it has 1.0, 2.0"),
        ("tako-sdist", "1.0", "sdist_only", "only a source distribution"),
        ("tako-native", "1.0", "no_wheel_for_platform", "no wheel of it"),
        ("Tako_Greet", "1.0.0", "install_failed", "no usable distribution"),  # a compatible wheel exists
    ],
)
def test_no_matching_distribution_is_told_apart_by_the_wheelhouse_files(
    tmp_path, name: str, version: str, code: str, fragment: str
) -> None:
    for filename in (
        "tako_greet-1.0-py3-none-any.whl",
        "tako_greet-2.0-py3-none-any.whl",
        "tako_sdist-1.0.tar.gz",
        "tako_native-1.0-cp39-cp39-win_amd64.whl",
        "not-a-distribution.txt",
        "bad_name-x-y-z.whl",
    ):
        (tmp_path / filename).write_text("")
    error = resolve.classify(_no_match(name, version), index_url=None, wheelhouse=str(tmp_path))
    assert error.code == code, error.message
    assert fragment in error.message
    assert error.package == name.lower().replace("_", "-")


def test_an_index_page_is_read_for_the_listing(tmp_path) -> None:
    page = tmp_path / "simple" / "tako-x"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        '<html><body><a href="../../files/tako_x-1.0.tar.gz#sha256=ab">tako_x-1.0.tar.gz</a></body></html>'
    )
    files = resolve.list_files("tako-x", index_url=f"file://{tmp_path}/simple", wheelhouse=None)
    assert files == resolve.Files(wheels=(), sdists=("1.0",))
    error = resolve.classify(
        _no_match("tako-x", "1.0"), index_url=f"file://{tmp_path}/simple", wheelhouse=None
    )
    assert error.code == "sdist_only"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TAKOHOST_PACKAGE_LAYER_MAX_BYTES", "lots"), ("TAKOHOST_PACKAGE_INSTALL_TIMEOUT_S", "-1")],
)
def test_a_bad_setting_names_its_variable(monkeypatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=variable):
        config.current()


def test_the_defaults(monkeypatch) -> None:
    for variable in (
        "TAKOHOST_PACKAGE_LAYER_MAX_BYTES",
        "TAKOHOST_PACKAGE_INSTALL_TIMEOUT_S",
        "TAKOHOST_PACKAGE_INDEX_URL",
    ):
        monkeypatch.delenv(variable, raising=False)
    cfg = config.current()
    assert (cfg.max_bytes, cfg.timeout_s, cfg.index_url) == (512 * 1024 * 1024, 300.0, None)
    assert config.interpreter().startswith("cpython-3")


def test_takohost_dev_keeps_one_package_directory_per_data_dir_outside_it(tmp_path, monkeypatch) -> None:
    import pathlib

    from host_cli import devmode

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    one = devmode.dev_package_dir(pathlib.Path(tmp_path / "checkout" / ".takohost"))
    assert one == devmode.dev_package_dir(pathlib.Path(tmp_path / "checkout" / "x" / ".." / ".takohost"))
    assert one != devmode.dev_package_dir(pathlib.Path(tmp_path / "other"))
    assert one.startswith(str(tmp_path / "cache" / "takohost" / "dev-packages") + "/")
    assert "checkout" not in one  # a context's mountinfo shows it: never the data dir's path
