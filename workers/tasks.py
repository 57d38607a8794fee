"""Celery task registry: imports every task module so a worker knows all task names
(``services.celery_app.TASK_MODULES`` names this module; Celery imports it in worker processes)."""

from __future__ import annotations

from workers import cron_tasks, operations_tasks  # noqa: F401 - register their tasks on import
from workers.engine import tasks as engine_tasks  # noqa: F401 - registers run_context

#: Modules that register tasks on ``services.celery_app.app`` when imported.
TASK_DEFINING_MODULES = (operations_tasks, engine_tasks, cron_tasks)
