"""The instance aggregate's writes have one home (docs/spec/architecture.md#ar-shape):
every statement that writes an instance, its steps, history, inbox events, timers or its UID's
closure is a named statement of ``models/instance_sql.py`` (the tenant logs' own counter on the
instance row, ``log_bytes``, is ``models/log_sql.py``'s). This scan of the product code fails when
such a write is built anywhere else again — in SQL text or with SQLAlchemy Core / the ORM."""

from __future__ import annotations

import re

from tests.support import code_scan

TABLES = r"(instances|history_events|steps|inbox_events|timers|workflow_closures)"
WRITES = re.compile(
    rf"(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{TABLES}\b"
    r"|(sa\.(update|delete|insert)|postgresql\.insert)\(\s*(inst_models\.|INSTANCES\b|TIMERS\b)"
    r"|session\.add\(\s*inst_models\."
    r"|inst_models\.(Instance|HistoryEvent|Step|InboxEvent|Timer|WorkflowClosure)\("
)
#: Where such writes belong (the migrations, which create the tables, are not scanned: ``code_scan.sources``).
HOMES = {"models/instance_sql.py"}
#: models/log_sql.py moves only the instance's ``log_bytes`` (the tenant log aggregate's quota counter).
LOG_BYTES = re.compile(r"UPDATE instances\s+SET log_bytes\b|UPDATE instances\s*\n\s*SET log_bytes\b")


def test_instance_writes_are_built_in_models_instance_sql_only():
    found = []
    for relative, code in code_scan.sources(code_scan.ROOT):
        if relative in HOMES:
            continue
        for match in WRITES.finditer(code):
            if relative == "models/log_sql.py" and LOG_BYTES.match(code, match.start()):
                continue
            line = code.count("\n", 0, match.start()) + 1
            found.append(f"{relative}:{line}: {match.group(0)}")
    assert found == [], "instance writes outside models/instance_sql.py:\n" + "\n".join(found)
