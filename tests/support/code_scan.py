"""Reading product code for a scan: the code and its SQL text without docstrings and comments
(a docstring may well say ``UPDATE cron_matches … WHERE pk``), line numbers kept."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize
from collections.abc import Callable, Iterable

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The product's packages (the migrations, which create the tables, are left out by :func:`sources`).
PACKAGES = ("host_api", "services", "workers", "beat", "core", "models", "host_cli", "takohost")


def code_of(text: str) -> str:
    """``text`` (Python source) with its docstrings and comments blanked by spaces."""
    lines = text.splitlines(keepends=True)
    blank: list[tuple[int, int, int, int]] = []
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                blank.append((first.lineno, first.col_offset, first.end_lineno or first.lineno, first.end_col_offset or 0))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            blank.append((token.start[0], token.start[1], token.end[0], token.end[1]))
    for start_line, start_col, end_line, end_col in blank:
        for number in range(start_line, end_line + 1):
            line = lines[number - 1]
            left = start_col if number == start_line else 0
            right = end_col if number == end_line else len(line.rstrip("\n"))
            lines[number - 1] = line[:left] + " " * (right - left) + line[right:]
    return "".join(lines)


def sources(root: pathlib.Path = ROOT) -> list[tuple[str, str]]:
    """``[(path relative to root, code_of(its text))]`` of every product module under ``root``
    except the migrations, in path order."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "/migrations/" not in relative:
                found.append((relative, code_of(path.read_text(encoding="utf-8"))))
    return found


def found_outside(
    homes: set[str],
    find: Callable[[str, str], Iterable[re.Match[str]]],
    root: pathlib.Path = ROOT,
) -> list[str]:
    """``path:line: text`` of each match that ``find(path, code)`` reports in a product module
    under ``root`` other than ``homes`` (paths relative to ``root``), in path and then text order:
    what the store scans list as writes built away from their store module."""
    found = []
    for relative, code in sources(root):
        if relative in homes:
            continue
        for match in sorted(find(relative, code), key=lambda m: m.start()):
            line = code.count("\n", 0, match.start()) + 1
            found.append(f"{relative}:{line}: {match.group(0)}")
    return found
