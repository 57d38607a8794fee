"""WorkerVersion validation through the sandbox (CONTRACT §3.2).

The main module is imported in a fresh sandbox child (``workers.engine.sandbox``, job kind
``validate``) with a parent-side time limit of ``settings.validation_timeout_s`` seconds. Nothing
the code does can hurt the worker: an import error, ``sys.exit``, ``os._exit``, a signal or an
endless loop becomes a failed validation with a clear message, and the child is killed and
proven dead before this returns.

Not imported by the API (it reaches ``workers.engine``); the reconcile task calls it.
"""

from __future__ import annotations

import dataclasses

from takohost import config
from workers.engine import sandbox


@dataclasses.dataclass(frozen=True)
class Validation:
    """The outcome: ``observed`` is the Version's new ``observed`` dict; ``error`` is the message
    for the failed Operation (None when the code validated)."""

    observed: dict
    error: str | None


def validate_spec(spec: dict, *, settings: config.Settings | None = None) -> Validation:
    """Import ``spec["mainModule"]`` (with ``spec["modules"]`` beside it) in a sandbox child.

    Success → ``observed = {"validated": true, "workflowClasses": [...], "handlers": [...]}``
    (names of module attributes that are classes with a callable ``run``; ``["scheduled"]`` when
    a callable ``scheduled`` exists). Failure → ``observed = {"validated": false, "error": msg}``
    where ``msg`` is the traceback's last line (or the time-out / crash description).

    Raises:
        sandbox.ZygoteUnavailable: no child could be started (a host problem: retried).
    """
    settings = settings or config.load_settings()
    outcome = sandbox.validate_version(
        zygote=sandbox.get_zygote(),
        main_module=spec["mainModule"],
        modules=spec["modules"],
        time_limit_seconds=settings.validation_timeout_s,
    )
    if outcome.ok:
        return Validation(
            observed={
                "validated": True,
                "workflowClasses": list(outcome.workflow_classes),
                "handlers": list(outcome.handlers),
            },
            error=None,
        )
    message = outcome.message or "the main module did not import"
    return Validation(observed={"validated": False, "error": message}, error=message)
