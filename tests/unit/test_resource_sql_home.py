"""The resources-and-Operations aggregate's writes have one home (docs/spec/architecture.md#ar-shape):
every statement that inserts, updates or deletes a resource, an Operation, a resource reference or
an Idempotency-Key record is built in ``models/resource_sql.py``. This scan of the product code
fails when such a write is built anywhere else again — in SQL text, with SQLAlchemy Core (also
through a model's ``__table__``), or through the ORM (a new row built, or a row added to the
session, or a column of a loaded row assigned: ``resource.phase = …``)."""

from __future__ import annotations

import pathlib
import re

from tests.support import code_scan

TABLES = r"(resources|operations|resource_refs|idempotency_keys)"
MODEL = r"res_models\.(Resource|Operation|ResourceRef|IdempotencyRecord)\b"
WRITES = re.compile(
    rf"(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{TABLES}\b"
    rf"|(sa\.(update|delete|insert)|postgresql\.insert|session\.add|session\.merge)\(\s*{MODEL}"
    rf"|{MODEL}(\(|\.__table__)"
    r"|session\.add\(\s*(op|operation|resource|ref)\s*\)"
)
#: An attribute write of a loaded resource or Operation row (``resource.phase = …``, ``op.state, … = …``,
#: also through an item of a tuple: ``loaded[0].next_attempt_at = …``): the row functions of
#: ``models/resource_sql.py`` write those columns.
ROW_WRITES = re.compile(
    r"^[ \t]*(op|operation|resource|workflow|trigger|version|deployment|record|\w+\[\d+\])\."
    r"(phase|observed|observed_at|spec|generation|latest_operation_id|deleted_at|private_inputs|output"
    r"|state|effect|error|attempts|next_attempt_at|request|response_status|response_body)\b"
    r"\s*(,\s*[\w.]+\s*)*=(?!=)",
    re.MULTILINE,
)
#: ``name = res_models.Resource`` (or another of the family's models): a local alias of a model.
ALIAS = re.compile(rf"^[ \t]*(\w+)[ \t]*=[ \t]*{MODEL}[ \t]*$", re.MULTILINE)
#: Where such writes belong.
HOMES = {"models/resource_sql.py"}


def resource_writes_outside(root: pathlib.Path) -> list[str]:
    """``path:line: text`` of each resource, Operation, reference or Idempotency-Key write built
    outside :data:`HOMES` in the tree at ``root``."""
    def writes(_path: str, code: str) -> list[re.Match[str]]:
        matches = [*WRITES.finditer(code), *ROW_WRITES.finditer(code)]
        for alias in {m.group(1) for m in ALIAS.finditer(code)}:
            through = re.compile(rf"(sa\.(update|delete|insert)|postgresql\.insert)\(\s*{alias}\b")
            matches += through.finditer(code)
        return matches

    return code_scan.found_outside(HOMES, writes, root)


def test_resource_writes_are_built_in_models_resource_sql_only():
    found = resource_writes_outside(code_scan.ROOT)
    assert found == [], "resource writes outside models/resource_sql.py:\n" + "\n".join(found)
