"""host_cli.entry: a Ctrl-C that lands in a finalizer (a socket the garbage collector closes)
still ends the command with ``interrupted`` and status 130, not "Exception ignored in" with a
traceback and the command going on (docs/spec/host-features.md#hf-console)."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import weakref

import host_cli.main
from host_cli import entry


def main():
    class Connection:
        pass

    def close():
        raise KeyboardInterrupt  # what SIGINT raises when it arrives inside the finalizer

    connection = Connection()
    weakref.finalize(connection, close)
    del connection
    print("went on")


host_cli.main.main = main
entry.run()
"""


def test_an_interrupt_inside_a_finalizer_ends_the_command_quietly():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 130 and result.stderr.endswith("interrupted\n"), (result.returncode, result.stderr)
    assert "went on" not in result.stdout


def test_other_unraisable_errors_are_still_reported():
    program = PROGRAM.replace("raise KeyboardInterrupt  # what SIGINT raises when it arrives inside the finalizer",
                              "raise ValueError('a broken close')")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "went on" in result.stdout
    assert "Exception ignored in" in result.stderr and "ValueError: a broken close" in result.stderr
