"""The two log commands (``instances logs``, ``run-logs``) share their options through
``host_cli.logs.log_command``: both take ``--follow``/``--interval``/``--json`` and both refuse
``--follow`` with ``--json`` before they reach the API (a usage error, status 2)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from host_cli.main import main


@pytest.mark.parametrize(
    "command",
    [("instances", "logs", "orders", "A-1"), ("run-logs", "digest", "2030-03-04T10:06:00Z")],
)
def test_follow_and_json_are_refused_together(command: tuple[str, ...]) -> None:
    # An address nothing listens on: the refusal must come before any request.
    result = CliRunner().invoke(main, [*command, "--follow", "--json", "--url", "http://127.0.0.1:9", "--token", "t"])
    assert result.exit_code == 2, result.output
    assert "--follow and --json do not go together" in result.output


@pytest.mark.parametrize("command", [("instances", "logs"), ("run-logs",)])
def test_both_log_commands_offer_the_same_reading_options(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--follow", "--interval", "--json", "--url", "--token", "--space"):
        assert option in result.output, (option, result.output)
