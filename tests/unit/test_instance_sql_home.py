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
    def writes(path: str, code: str) -> list[re.Match[str]]:
        return [match for match in WRITES.finditer(code)
                if not (path == "models/log_sql.py" and LOG_BYTES.match(code, match.start()))]

    found = code_scan.found_outside(HOMES, writes)
    assert found == [], "instance writes outside models/instance_sql.py:\n" + "\n".join(found)
