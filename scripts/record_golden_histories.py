#!/usr/bin/env python3
"""Record the golden histories (tests/golden/README.md) from the real engine, once, and whenever a
deliberate change of the engine's history is made: ``python scripts/record_golden_histories.py
[NAME ...]``. Runs ``tests/golden/record.py`` under pytest (it needs the test run's servers:
``TAKOHOST_TEST_DATABASE_URL``/``TAKOHOST_TEST_REDIS_URL``, or embedded ones), then prints what
changed (``git diff --stat tests/golden``). Review the diff: each change is a change of replay."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    env = {**os.environ, "TAKOHOST_GOLDEN_ONLY": ",".join(argv)}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/golden/record.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode == 0:
        subprocess.run(["git", "diff", "--stat", "--", "tests/golden"], cwd=ROOT, check=False)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
