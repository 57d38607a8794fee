"""Every ``takohost`` help text stands on its own (docs/spec/host-features.md#hf-newcomer): it cites no document that is
not in the repository (docs/spec/README.md, docs/spec/architecture.md, the Forms' own texts live outside it), and ``--version`` works."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from host_cli.main import main


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_no_help_text_cites_a_document_outside_the_repository() -> None:
    runner = CliRunner()
    paths = [(), *_commands(main)]
    assert ("workflows", "list") in paths and ("triggers", "delete") in paths and ("resources", "get") in paths
    for path in paths:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert not re.search(r"CONTRACT|DESIGN|§|seed \d", result.output), (path, result.output)  # cite-docs: ignore


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"takohost \d+\.\d+\.\d+\S*\n", result.output)
