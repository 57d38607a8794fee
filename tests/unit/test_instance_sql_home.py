"""The instance aggregate's writes have one home (docs/spec/architecture.md#ar-shape):
every statement that writes an instance, its steps, history, inbox events, timers or its UID's
closure is a named statement of ``models/instance_sql.py`` (the tenant logs' own counter on the
instance row, ``log_bytes``, is ``models/log_sql.py``'s). This scan of the product code fails when
such a write is built anywhere else again — in SQL text or with SQLAlchemy Core / the ORM."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("host_api", "services", "workers", "beat", "core", "models", "host_cli", "takohost")
TABLES = r"(instances|history_events|steps|inbox_events|timers|workflow_closures)"
WRITES = re.compile(
    rf"(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{TABLES}\b"
    r"|(sa\.(update|delete|insert)|postgresql\.insert)\(\s*(inst_models\.|INSTANCES\b|TIMERS\b)"
    r"|session\.add\(\s*inst_models\."
    r"|inst_models\.(Instance|HistoryEvent|Step|InboxEvent|Timer|WorkflowClosure)\("
)
#: Where such writes belong (the migrations create the tables).
HOMES = {"models/instance_sql.py"}
#: models/log_sql.py moves only the instance's ``log_bytes`` (the tenant log aggregate's quota counter).
LOG_BYTES = re.compile(r"UPDATE instances\s+SET log_bytes\b|UPDATE instances\s*\n\s*SET log_bytes\b")


def _code(text: str) -> str:
    """``text`` with its docstrings and comments blanked (the scan reads code and SQL; a docstring
    may well say ``UPDATE instances … WHERE pk``), line numbers kept."""
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


def test_instance_writes_are_built_in_models_instance_sql_only():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in HOMES or "/migrations/" in relative:
                continue
            code = _code(path.read_text(encoding="utf-8"))
            for match in WRITES.finditer(code):
                if relative == "models/log_sql.py" and LOG_BYTES.match(code, match.start()):
                    continue
                line = code.count("\n", 0, match.start()) + 1
                found.append(f"{relative}:{line}: {match.group(0)}")
    assert found == [], "instance writes outside models/instance_sql.py:\n" + "\n".join(found)
