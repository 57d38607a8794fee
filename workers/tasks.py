"""Celery task registry: imports every task module so a worker knows all task names."""

from __future__ import annotations

import importlib

#: Modules that register tasks on ``workers.celery_app.app`` when imported.
TASK_DEFINING_MODULES = (
    "workers.operations_tasks",
    "workers.engine.tasks",
    "workers.cron_tasks",
)

for _name in TASK_DEFINING_MODULES:
    importlib.import_module(_name)
