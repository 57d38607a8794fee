"""The host's replay check of a created WorkerVersion, from the command line (docs/spec/host-features.md#hf-testing):
``POST …/resources/{versionUid}/check``, its Operation followed until it ends (its ``progress``
shown), then the Version's ``observed.replayCheck``. Used by ``takohost versions check NAME`` and by
``takohost deploy`` before a new Version gets weight. No click here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from host_cli import client as http
from host_cli.errors import CommandFailed

__all__ = ["describe", "failed", "run", "totals_line"]


def run(
    api: http.Client,
    version_uid: str,
    *,
    terminal: int = 0,
    timeout: float = 600.0,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run a check of ``version_uid`` on the host and return its ``observed.replayCheck``
    (``{"passed", "totals", "divergent", …}``; ``services.replay_checks.summary``).
    ``on_progress`` sees each new ``{"checked", "total", "totals"}``.

    Raises:
        ClientError: the host's refusal (``not_found``, ``resource_busy``…) or ``timeout``.
        CommandFailed: ``check_failed`` when the Operation failed.
    """
    key = f"takohost-check-{uuid.uuid4()}"  # a new check each time: new instances may have started
    operation = api.check_version(version_uid, terminal=terminal, idempotency_key=key)
    last: dict[str, Any] = {}

    def poll(op: dict[str, Any]) -> None:
        progress = op.get("progress")
        if progress and progress != last and on_progress is not None:
            last.clear()
            last.update(progress)
            on_progress(progress)

    if operation.get("state") not in http.TERMINAL_OPERATION_STATES:
        operation = api.wait_operation(operation["id"], timeout=timeout, on_poll=poll)
    if operation.get("state") != "succeeded":
        error = operation.get("error") or {}
        raise CommandFailed(str(error.get("code") or "check_failed"), str(error.get("message") or "the check failed"))
    check = (api.get_resource(version_uid).get("observed") or {}).get("replayCheck") or {}
    if check.get("operationId") != operation["id"]:
        raise CommandFailed("check_failed", "the Version holds no result of this check (re-validated meanwhile?)")
    return check


def describe(result: dict[str, Any]) -> str:
    """One line for one instance's result (rich markup, escaped)."""
    head = f"{escape(result['workflow'])} {escape(result['id'])}"
    if result["result"] == "diverged":
        message = str(result.get("message") or "")
        if message.startswith("diverged at step"):  # the host's message names the step itself
            return f"{head}: [red]{escape(message)}[/red]"
        return f"{head}: [red]diverged at step {result.get('step')}[/red] ({escape(message)})"
    if result["result"] == "compatible":
        return f"{head}: [green]compatible[/green]"
    return f"{head}: [yellow]{result['result']}[/yellow] ({escape(result['message'])})"


def totals_line(totals: dict[str, int]) -> str:
    """``"3 compatible, 1 diverged, 0 error(s), 0 not checked"``."""
    return (
        f"{totals.get('compatible', 0)} compatible, {totals.get('diverged', 0)} diverged, "
        f"{totals.get('error', 0)} error(s), {totals.get('not_checked', 0)} not checked"
    )


def failed(check: dict[str, Any], *, console: Console) -> CommandFailed | None:
    """Print the non-compatible instances of ``check``; the ``CommandFailed`` to raise (``None``: passed)."""
    if check.get("passed"):
        return None
    for result in check.get("divergent") or []:
        console.print(describe(result))
    totals = check.get("totals") or {}
    shown = check.get("listed", 0)
    more = sum(totals.get(k, 0) for k in ("diverged", "error", "not_checked")) - shown
    if more > 0:
        console.print(f"… and {more} more not listed (the host keeps the first {shown})")
    return CommandFailed(
        "incompatible" if totals.get("diverged") else "check_incomplete",
        f"{totals.get('diverged', 0)} instance(s) diverged, {totals.get('error', 0) + totals.get('not_checked', 0)} not checked",
    )
