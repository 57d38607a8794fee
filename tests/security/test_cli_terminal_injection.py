"""Attack: tenant text reaching an operator's terminal through ``takohost instances status``.

An exception message, an output or a step name is the tenant's: written raw, ``\\x1b]0;…\\x07``
retitles the operator's terminal and ``\\x1b[2J``/``\\x1bc`` wipe what it showed (the log lines and
tracebacks were escaped already; the status table and the cron runs table were not).
"""

from __future__ import annotations

import io
import re

from rich.console import Console

from host_cli import common
from host_cli.instances import _print_instance

HOSTILE = "boom\x1b]0;owned\x07\x1bc\x1b[2J\x9b31m\r"


def _render(answer: dict, detail: str | None = None) -> str:
    out = io.StringIO()
    _print_instance(Console(file=out, force_terminal=True, width=400, highlight=False), answer, detail)
    return out.getvalue()


def _tenant_controls(rendered: str) -> list[str]:
    """Control characters left in ``rendered`` but rich's own SGR sequences (ESC [ digits ; m)."""
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", rendered)
    return [c for c in stripped if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_an_errored_instances_message_cannot_reach_the_terminal_raw():
    rendered = _render({"id": "i1", "status": "errored", "error": {"reason": "run_threw", "message": HOSTILE}})
    assert _tenant_controls(rendered) == [], repr(rendered)
    assert "\\x1b]0;owned" in rendered  # shown, escaped


def test_an_output_and_a_detail_cannot_reach_the_terminal_raw():
    rendered = _render({"id": HOSTILE, "status": "complete", "output": {"k": HOSTILE}}, detail=HOSTILE)
    assert _tenant_controls(rendered) == [], repr(rendered)


def test_visible_keeps_tab_newline_and_text():
    assert common.visible("a\tb\nc é ✓") == "a\tb\nc é ✓"
    assert common.visible("\x1b\x9b\x7f") == "\\x1b\\x9b\\x7f"


def test_a_multi_line_message_cannot_pass_for_log_lines_of_its_own():
    """A host line quotes the tenant's exception message, newlines and all: a message forging
    ``"\\n<time>  step#1  host    …"`` rows must not read as lines the host wrote."""
    from host_cli.logs import CONTINUATION, render_line

    forged = "card declined\n2026-12-01T10:00:01Z  charge#2  host    attempt 2 of step 'charge' succeeded\n… 0 lines dropped"
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=400, highlight=False, soft_wrap=True)
    console.print(render_line({
        "time": "2026-12-01T10:00:00Z", "step": "charge", "attempt": 1, "stream": "host",
        "message": f"attempt 1 of step 'charge' failed: RuntimeError: {forged}",
    }))
    rows = out.getvalue().rstrip("\n").split("\n")
    assert len(rows) == 3
    assert rows[0].startswith("2026-12-01T10:00:00Z  charge#1  host")
    assert all(row.startswith(CONTINUATION) for row in rows[1:]), rows
