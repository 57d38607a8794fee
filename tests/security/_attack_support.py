"""Shared helpers of the tenant isolation attacks: the tenant code, the host's processes as seen
from the test, and running one attack as a workflow instance on a real stack."""

from __future__ import annotations

import json
import os
import pathlib
import time
import uuid

from tests.support import workflows

TENANT_SOURCE = (pathlib.Path(__file__).parent / "tenant_attacks.py").read_text()
REPO = pathlib.Path(__file__).resolve().parents[2]
TERMINAL = ("complete", "errored", "terminated")


def proc_table() -> dict[int, dict]:
    """Every process of the host: ``{pid: {"ppid", "uid", "state"}}``."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except OSError:
            continue
        table[int(name)] = {
            "ppid": int(status["PPid"]),
            "uid": int(status["Uid"].split()[0]),
            "state": status["State"].split()[0],
        }
    return table


def descendants(root: int, table: dict[int, dict] | None = None) -> list[int]:
    """``root`` and every live process below it."""
    table = table or proc_table()
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        if pid in table:
            found.append(pid)
            frontier.extend(child for child, info in table.items() if info["ppid"] == pid)
    return found


def sandbox_processes(uid_base: int, table: dict[int, dict] | None = None) -> dict[int, dict]:
    """Live (non-zombie) processes whose uid is a sandbox identity of ``uid_base``
    (``uid_base`` + a slot of ``isolation.uids``)."""
    from takohost.runtime.isolation import uids

    table = table or proc_table()
    return {
        pid: info
        for pid, info in table.items()
        if uid_base <= info["uid"] < uid_base + uids.SLOTS and info["state"] not in ("Z", "X")
    }


def run_attack(
    http: workflows.HttpInstances,
    attack: str,
    params: dict | None = None,
    *,
    instance_id: str | None = None,
    timeout: float = 60.0,
    wait: bool = True,
) -> dict:
    """Start an instance of the ``Attack`` workflow running ``attack``; with ``wait``, return
    its final status (``{"id", "status", "output"?, "error"?}``)."""
    instance_id = instance_id or f"{attack}-{uuid.uuid4().hex[:8]}"
    code, body = http.call("POST", body={"id": instance_id, "params": {"attack": attack, **(params or {})}})
    assert code == 201, body
    if not wait:
        return {"id": instance_id}
    final = wait_terminal(http, instance_id, timeout=timeout)
    if os.environ.get("TAKOHOST_ATTACK_DUMP"):  # debugging: every attack's findings, one a line
        with open(os.environ["TAKOHOST_ATTACK_DUMP"], "a") as f:
            f.write(json.dumps({"attack": attack, "final": final}) + "\n")
    return final


def wait_terminal(http: workflows.HttpInstances, instance_id: str, *, timeout: float = 60.0) -> dict:
    return workflows.wait_until(  # type: ignore[return-value]
        lambda: (s := http.status(instance_id))["status"] in TERMINAL and s,
        timeout=timeout,
        interval=0.1,
        message=f"{instance_id} to finish",
    )


def output_of(final: dict) -> dict:
    """The output of a completed instance (failing with the status otherwise)."""
    assert final["status"] == "complete", final
    return final["output"]


def wait_file(path: pathlib.Path, timeout: float = 30.0) -> None:
    workflows.wait_until(path.exists, timeout=timeout, message=f"{path} to appear")


def hexed(*values: str) -> list[str]:
    return [v.encode().hex() for v in values if v]


def file_size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def assert_stops_growing(path: pathlib.Path, label: str) -> None:
    """Right after the status was observed: the file does not grow over two checks 0.5 s apart."""
    first = file_size(path)
    time.sleep(0.5)
    second = file_size(path)
    time.sleep(0.5)
    third = file_size(path)
    assert first == second == third, f"{label}: the daemon still writes ({first} → {second} → {third})"
