"""WorkerVersion validation in the sandbox (docs/spec/worker-forms.md#wf-version): import a
Version's main module in a fresh child (job kind ``validate``: no vars, no bindings, no event)
under a time limit, report what it exports, and prove the child dead before answering.
:func:`validate_spec` is what the reconcile task (``workers.operations_tasks``) calls.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from core import config
from takohost.runtime import protocol
from workers.egress import client as egress_client
from workers.sandbox.child import ChildGone
from workers.sandbox.zygote import Zygote, get_zygote

__all__ = ["Validation", "ValidationOutcome", "validate_spec", "validate_version"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ValidationOutcome:
    """Result of validating a Version's code (docs/spec/worker-forms.md#wf-version).

    ``ok`` with ``workflow_classes`` (sorted names) and ``handlers`` (``("scheduled",)`` or
    ``()``); otherwise ``message`` (the traceback's last line, or what went wrong).
    """

    ok: bool
    workflow_classes: tuple[str, ...] = ()
    handlers: tuple[str, ...] = ()
    message: str | None = None


def validate_version(
    *,
    zygote: Zygote,
    main_module: str,
    modules: dict[str, str],
    time_limit_seconds: float = 10.0,
    space: str | None = None,
    packages: str | None = None,
) -> ValidationOutcome:
    """Import ``main_module`` in a fresh child with a time limit and report what it exports
    (``packages``: the name of the Version's package layer, put on its ``sys.path``).

    Never raises for anything the code does: an import error, ``sys.exit`` at import, a crash
    (``os._exit``, a signal) and a time-out all become ``ok=False`` with a message. Raises
    ``ZygoteUnavailable`` only when no child could be started.
    """
    job: dict[str, Any] = {
        "kind": "validate",
        "mainModule": main_module,
        "modules": modules,
        "vars": {},
        "bindings": [],
    }
    if packages is not None:
        job["packages"] = packages
    try:
        handle = zygote.spawn(job, space=space)
    except (ChildGone, TimeoutError) as exc:
        return ValidationOutcome(ok=False, message=f"the validation process failed to start: {exc}")
    with handle:
        try:
            message = protocol.check_child_message(handle.recv(timeout=time_limit_seconds))
            handle.kill_and_wait()
            for record in handle.finish_egress():  # a validation has no logs: the worker's log has them
                logger.info("validation %s", egress_client.describe(record), extra={"space": space})
        except TimeoutError:
            return ValidationOutcome(
                ok=False, message=f"importing {main_module} did not finish within {time_limit_seconds:g} s"
            )
        except ChildGone:
            return ValidationOutcome(
                ok=False,
                message=f"the process importing {main_module} exited without a result (os._exit or a crash)",
            )
        except protocol.ProtocolError as exc:
            return ValidationOutcome(ok=False, message=f"the validation process broke the protocol: {exc}")
    if message["op"] == "validated":
        return ValidationOutcome(
            ok=True, workflow_classes=tuple(message["workflowClasses"]), handlers=tuple(message["handlers"])
        )
    if message["op"] == "import_error":
        return ValidationOutcome(ok=False, message=message["message"])
    return ValidationOutcome(ok=False, message=f"unexpected validation answer {message['op']!r}")


@dataclasses.dataclass(frozen=True)
class Validation:
    """The outcome: ``observed`` is the Version's new ``observed`` dict; ``error`` is the message
    for the failed Operation (None when the code validated)."""

    observed: dict
    error: str | None


def validate_spec(
    spec: dict,
    *,
    space: str | None = None,
    settings: config.Settings | None = None,
    packages: str | None = None,
) -> Validation:
    """Import ``spec["mainModule"]`` (with ``spec["modules"]`` beside it) in a sandbox child.

    Success → ``observed = {"validated": true, "workflowClasses": [...], "handlers": [...]}``
    (names of module attributes that are classes with a callable ``run``; ``["scheduled"]`` when
    a callable ``scheduled`` exists). Failure → ``observed = {"validated": false, "error": msg}``
    where ``msg`` is the traceback's last line (or the time-out / crash description).

    The main module is imported in a fresh sandbox child (job kind ``validate``) with a parent-side
    time limit of ``settings.validation_timeout_s`` seconds: an import error, ``sys.exit``,
    ``os._exit``, a signal or an endless loop becomes a failed validation with a clear message,
    and the child is killed and proven dead before this returns (docs/spec/worker-forms.md#wf-version). ``packages``:
    the name of the Version's installed layer (``workers.packages``), put on its ``sys.path``.

    Raises:
        workers.sandbox.zygote.ZygoteUnavailable: no child could be started (a host problem: retried).
    """
    settings = settings or config.load_settings()
    outcome = validate_version(
        zygote=get_zygote(),
        main_module=spec["mainModule"],
        modules=spec["modules"],
        time_limit_seconds=settings.validation_timeout_s,
        space=space,
        packages=packages,
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
