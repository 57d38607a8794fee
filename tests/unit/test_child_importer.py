"""The child's import of a Version's main module without the import system
(``takohost.runtime.child.importer.SourceModules.load``): the same module as ``importlib.import_module``
makes, and the same clean-up."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from takohost.runtime.child import importer

MODULES = {
    "mainmod.py": "import sys\nVALUE = 1\nME = sys.modules[__name__]\n",
    "pkgmain/__init__.py": "PKG = True\n",
    "pkgmain/sub.py": "SUB = 2\n",
    "broken.py": "raise RuntimeError('at import')\n",
}


@pytest.fixture
def finder():
    made = importer.SourceModules(MODULES)
    made.install()
    yield made
    sys.meta_path.remove(made)
    for name in [n for n in sys.modules if n.split(".")[0] in ("mainmod", "pkgmain", "broken")]:
        del sys.modules[name]


def _attributes(module: types.ModuleType) -> dict[str, str]:
    return {k: repr(v) for k, v in vars(module).items() if k not in ("__builtins__", "ME")}


@pytest.mark.parametrize("name", ["mainmod", "pkgmain"])
def test_load_makes_the_module_importlib_makes(finder, name):
    loaded = finder.load(name)
    assert sys.modules[name] is loaded
    del sys.modules[name]
    imported = importlib.import_module(name)
    assert loaded is not imported
    assert _attributes(loaded) == _attributes(imported)
    assert (
        loaded.__spec__.origin
        == imported.__spec__.origin
        == f"{importer.VIRTUAL_ROOT}/{name}" + ("/__init__.py" if name == "pkgmain" else ".py")
    )


def test_the_module_is_in_sys_modules_while_its_code_runs(finder):
    module = finder.load("mainmod")
    assert module.ME is module


def test_a_package_loaded_directly_imports_its_submodules(finder):
    package = finder.load("pkgmain")
    assert importlib.import_module("pkgmain.sub").SUB == 2
    assert package.sub.SUB == 2


def test_a_module_whose_code_raises_is_not_left_imported(finder):
    with pytest.raises(RuntimeError, match="at import"):
        finder.load("broken")
    assert "broken" not in sys.modules


def test_only_top_level_modules_of_the_version_load(finder):
    with pytest.raises(ImportError):
        finder.load("pkgmain.sub")
    with pytest.raises(ImportError):
        finder.load("json")


def test_install_forgets_modules_of_the_versions_names_and_only_those():
    sys.modules["pkgmain"] = types.ModuleType("pkgmain")
    sys.modules["pkgmain.old"] = types.ModuleType("pkgmain.old")
    sys.modules["pkgmainx"] = types.ModuleType("pkgmainx")  # a longer name, not a submodule
    made = importer.SourceModules(MODULES)
    try:
        made.install()
        assert "pkgmain" not in sys.modules and "pkgmain.old" not in sys.modules
        assert "pkgmainx" in sys.modules and "json" in sys.modules
    finally:
        sys.meta_path.remove(made)
        for name in ("pkgmain", "pkgmain.old", "pkgmainx"):
            sys.modules.pop(name, None)


def test_import_version_loads_a_top_level_main_module_and_imports_a_dotted_one(finder):
    module, _ = importer.import_version({"modules": MODULES, "mainModule": "mainmod.py"})
    assert module.VALUE == 1 and sys.modules["mainmod"] is module
    sub, _ = importer.import_version({"modules": MODULES, "mainModule": "pkgmain/sub.py"})
    assert sub.SUB == 2 and sys.modules["pkgmain.sub"] is sub
    for extra in [m for m in sys.meta_path if isinstance(m, importer.SourceModules) and m is not finder]:
        sys.meta_path.remove(extra)


def test_module_paths_that_are_not_modules_or_take_a_reserved_name_are_refused():
    for bad in (
        {"../x.py": ""},
        {"main.txt": ""},
        {"__init__.py": ""},
        {"takohost/x.py": ""},
        {"sys.py": ""},
    ):
        with pytest.raises(ImportError):
            importer.SourceModules(bad)


def test_a_code_blob_round_trips_and_anything_else_is_none():
    code = compile("X = 1", f"{importer.VIRTUAL_ROOT}/main.py", "exec")
    assert importer.code_of(importer.code_blob(code)).co_filename == code.co_filename
    for junk in (None, 1, "not base64!", "AAAA", importer.code_blob(code)[8:]):
        assert importer.code_of(junk) is None


def test_a_valid_blob_of_the_module_is_used_and_one_naming_another_file_is_not():
    source = {"main.py": "VALUE = 'source'\n"}
    own = compile("VALUE = 'blob'", f"{importer.VIRTUAL_ROOT}/main.py", "exec")
    other = compile("VALUE = 'elsewhere'", "/elsewhere/main.py", "exec")
    for blob, expected in ((own, "blob"), (other, "source")):
        finder = importer.SourceModules(source, {"main.py": importer.code_blob(blob)})
        finder.install()
        try:
            assert finder.load("main").VALUE == expected
        finally:
            sys.meta_path.remove(finder)
            sys.modules.pop("main", None)


def test_a_jobs_package_layer_is_appended_to_sys_path_after_the_standard_library(tmp_path, monkeypatch):
    layer = tmp_path / ("ab" * 20)
    layer.mkdir()
    (layer / "tako_layered.py").write_text("WORD = 'layered'\n")
    monkeypatch.setattr(importer, "PACKAGES_ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert importer.add_packages({}) is None
    assert importer.add_packages({"packages": "ab" * 20}) == str(layer)
    assert sys.path[-1] == str(layer)
    importer.add_packages({"packages": "ab" * 20})
    assert sys.path.count(str(layer)) == 1
    job = {"modules": {"main.py": "import tako_layered\nWORD = tako_layered.WORD\n"}, "mainModule": "main.py"}
    module, _ = importer.import_version({**job, "packages": "ab" * 20})
    assert module.WORD == "layered"
    sys.modules.pop("tako_layered", None)


@pytest.mark.parametrize("name", ["../" + "a" * 37, "/etc", "A" * 40, "a" * 41, 7, "cd" * 20])
def test_a_malformed_or_missing_layer_is_an_import_error(tmp_path, monkeypatch, name):
    monkeypatch.setattr(importer, "PACKAGES_ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ImportError, match="package layer"):
        importer.add_packages({"packages": name})
    assert not any(str(tmp_path) in entry for entry in sys.path)


def test_no_layer_root_means_no_layer(monkeypatch):
    monkeypatch.setattr(importer, "PACKAGES_ROOT", None)
    with pytest.raises(ImportError, match="not available"):
        importer.add_packages({"packages": "ab" * 20})
