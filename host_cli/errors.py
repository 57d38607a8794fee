"""The one error a client command stops with: :class:`CommandFailed` (``code``, ``message``, hints).

Kept apart from the click plumbing (``host_cli.common``, which prints it as
``error: <code>: <message>`` and exits 1) so that the deploy engine (``host_cli.deploy``) can raise
it without importing click.
"""

from __future__ import annotations

__all__ = ["CommandFailed"]


class CommandFailed(Exception):
    """A command cannot go on: printed as ``error: <code>: <message>`` plus ``hints`` lines."""

    def __init__(self, code: str, message: str, *hints: str, exit_status: int = 1) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.hints = hints
        #: The command's exit status (130 for an interrupted deploy, as for any Ctrl-C).
        self.exit_status = exit_status
