"""The tenant log aggregate's writes have one home (docs/spec/architecture.md#ar-shape): every
statement that writes a log line (``tenant_logs``: a batch, the log quota's marker line, the cap's
trim) or the log quota's bookkeeping (``log_bytes`` of an instance or of a Space's usage row) is
built **and executed** in ``models/log_sql.py``; the collector (``workers.tenant_logs``) calls its
functions. This scan of the product code fails when such a write is built anywhere else again — in
SQL text, with SQLAlchemy Core, through the ORM — or when one of log_sql's write statements is run
by another module. (The migrations' triggers, which move a Space's ``log_bytes`` with its
instances', are left out: they create the schema.)"""

from __future__ import annotations

import pathlib
import re

from tests.support import code_scan

MODELS = r"(tenant_log_models\.|models\.tenant_logs\.)"
WRITES = re.compile(
    # SQL text: a line's insert, update or delete; a log_bytes counter moved.
    r"(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+tenant_logs\b"
    r"|\bSET\s+log_bytes\b|\blog_bytes\s*=\s*(\w+\.)?log_bytes\b"
    r"|INSERT\s+INTO\s+space_usage(\s+AS\s+\w+)?\s*\([^)]*\blog_bytes\b"
    # Core and the ORM.
    rf"|(sa\.(update|delete|insert)|postgresql\.insert|session\.add|session\.merge)\(\s*{MODELS}"
    rf"|{MODELS}TenantLog\(|\.values\([^)]*\blog_bytes\s*=|\.log_bytes\s*[-+]?="
    # log_sql's own write statements, run by another module.
    r"|\blog_sql\.(INSERT|UPDATE|DELETE)_\w+"
)
#: Where such writes belong.
HOMES = {"models/log_sql.py"}


def log_writes_outside(root: pathlib.Path) -> list[str]:
    """``path:line: text`` of each tenant log write built or run outside :data:`HOMES` in the tree
    at ``root``."""
    return code_scan.found_outside(HOMES, lambda _path, code: WRITES.finditer(code), root)


def test_tenant_log_writes_are_built_in_models_log_sql_only():
    found = log_writes_outside(code_scan.ROOT)
    assert found == [], "tenant log writes outside models/log_sql.py:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_write(tmp_path):
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "stray.py").write_text(
        '"""UPDATE tenant_logs SET message = 1 (a docstring is not code)."""\n'
        'A = "DELETE FROM tenant_logs WHERE seq < 3"\n'
        'B = "UPDATE instances SET log_bytes = log_bytes + 1"\n'
        "session.add(tenant_log_models.TenantLog(seq=1))\n"
        "conn.execute(log_sql.INSERT_INSTANCE_LINES, {})  # UPDATE tenant_logs in a comment\n"
        "rows = log_sql.instance_page_txn(session, instance_pk=1, after=0, limit=5)\n",
        encoding="utf-8",
    )
    assert [finding.split(": ")[0] for finding in log_writes_outside(tmp_path)] == [
        "services/stray.py:2",
        "services/stray.py:3",
        "services/stray.py:4",
        "services/stray.py:5",
    ]
