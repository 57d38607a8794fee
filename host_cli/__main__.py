"""``python -m host_cli``: the ``takohost`` command."""

from host_cli.main import main

main()
