"""``python -m host_cli``: the ``takohost`` command."""

from host_cli.entry import run

run()
