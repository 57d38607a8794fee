"""takohost: a durable-workflow and cron host.

The package root exports the host errors that workflow code imports (``from takohost import
StepFailed``); it must stay importable with the standard library alone (docs/spec/worker-forms.md#wf-errors).
"""

from __future__ import annotations

from takohost import errors as _errors
from takohost.errors import *  # noqa: F403 - the names of takohost.errors.__all__, below

__all__ = list(_errors.__all__)
