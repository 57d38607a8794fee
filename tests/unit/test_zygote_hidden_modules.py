"""The zygote forgets modules that ``site`` imported from the interpreter's own ``site-packages``
(a ``.pth`` file's ``import certifi``): a context cannot see that directory, and the module would
stand in for the same package of the Version's pinned layer (docs/packages.md)."""

from __future__ import annotations

import importlib
import sys

from takohost.runtime import zygote


def test_modules_of_a_hidden_directory_are_forgotten_and_others_kept(tmp_path, monkeypatch):
    hidden = tmp_path / "site-packages"
    (hidden / "tako_hidden_pkg").mkdir(parents=True)
    (hidden / "tako_hidden_pkg" / "__init__.py").write_text("WHERE = __file__\n")
    (hidden / "tako_hidden_mod.py").write_text("X = 1\n")
    visible = tmp_path / "layer"
    visible.mkdir()
    (visible / "tako_visible_mod.py").write_text("X = 2\n")
    monkeypatch.syspath_prepend(str(hidden))
    monkeypatch.syspath_prepend(str(visible))
    names = ("tako_hidden_pkg", "tako_hidden_mod", "tako_visible_mod")
    try:
        for name in names:
            importlib.import_module(name)
        zygote._forget_hidden_modules((str(hidden),))
        assert "tako_hidden_pkg" not in sys.modules and "tako_hidden_mod" not in sys.modules
        assert "tako_visible_mod" in sys.modules and "json" in sys.modules
    finally:
        for name in names:
            sys.modules.pop(name, None)
