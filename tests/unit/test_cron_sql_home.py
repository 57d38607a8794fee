"""The cron aggregate's writes have one home (docs/spec/architecture.md#ar-shape): every
statement that writes a cron schedule, a recorded match, a skip, a delivery, a run's link to the
instance it created or the beat's tick is built in ``models/cron_sql.py``. This scan of the
product code fails when such a write is built anywhere else again — in SQL text, with SQLAlchemy
Core, or through the ORM (a row added, or a row loaded into the session whose attribute writes
the unit of work would flush)."""

from __future__ import annotations

import pathlib
import re

from tests.support import code_scan

TABLES = r"(cron_schedules|cron_matches|cron_deliveries|cron_run_instances|cron_skips|beat_ticks)"
MODELS = r"(cron_models\.|models\.cron\.)"
WRITES = re.compile(
    rf"(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{TABLES}\b"
    rf"|(sa\.(update|delete|insert)|postgresql\.insert|session\.add|session\.merge|session\.get)\(\s*{MODELS}"
    rf"|{MODELS}(CronSchedule|CronMatch|CronDelivery|CronRunInstance|CronSkip|BeatTick)\("
)
#: Where such writes belong.
HOMES = {"models/cron_sql.py"}


def cron_writes_outside(root: pathlib.Path) -> list[str]:
    """``path:line: text`` of each cron write built outside :data:`HOMES` in the tree at ``root``."""
    return code_scan.found_outside(HOMES, lambda _path, code: WRITES.finditer(code), root)


def test_cron_writes_are_built_in_models_cron_sql_only():
    found = cron_writes_outside(code_scan.ROOT)
    assert found == [], "cron writes outside models/cron_sql.py:\n" + "\n".join(found)
