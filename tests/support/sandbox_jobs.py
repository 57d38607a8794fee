"""Running tenant code straight in a real zygote, for the attack tests: a workflow job of one
module and the output its ``run`` returned."""

from __future__ import annotations

import textwrap


def workflow_job(source: str, params: dict) -> dict:
    """The job frame of a workflow whose ``main.py`` is ``source`` (dedented; class ``W``), started
    with ``params``: no vars, no bindings."""
    return {
        "kind": "workflow",
        "mainModule": "main.py",
        "modules": {"main.py": textwrap.dedent(source)},
        "className": "W",
        "event": {"instanceId": "i", "params": params},
        "vars": {},
        "bindings": [],
    }


def run_output(zygote, source: str, params: dict, timeout: float = 30) -> dict:
    """Spawn ``source`` in ``zygote``, wait up to ``timeout`` seconds for its first answer, stop it
    and return what ``run`` returned (asserts that it returned)."""
    with zygote.spawn(workflow_job(source, params)) as handle:
        answer = handle.recv(timeout=timeout)
        handle.kill_and_wait()
    assert answer.get("op") == "run_returned", answer
    return answer["output"]
