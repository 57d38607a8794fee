"""Celery task registry: imports every task module so a worker knows all task names."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

#: Modules that register tasks on ``workers.celery_app.app`` when imported.
TASK_DEFINING_MODULES = (
    "workers.operations_tasks",
    "workers.engine.tasks",
    "workers.cron_tasks",
)

for _name in TASK_DEFINING_MODULES:
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a module is absent
        if exc.name != _name:
            raise
        log.error("task module %s is missing", _name)
