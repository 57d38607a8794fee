"""A Space cannot take the API from everyone with costly bodies (host_api.admission).

The attack (measured against a real ``takohost api``: 2 processes of 4 threads): eight requests
at once, each the deepest document that fits 1 MiB, held ordinary GETs of other Spaces for up to
28 s, because parsing and checking such a body is seconds of CPU under the GIL. Now each API
process works on one body over 256 KiB at a time; another is refused at once with ``503
backend_unavailable`` and ``Retry-After`` — read but not parsed, nothing written — while ordinary
requests go on. In-process: the test holds the process's slot itself, as a costly request in
another thread would.
"""

from __future__ import annotations

import json

import pytest

from host_api import admission
from tests.support import workflows

SOURCE = """
class Noop:
    def __init__(self, env): pass
    def run(self, event, step): return None
"""


@pytest.fixture()
def created(client, space_token, db_url):
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="Noop")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def create(instance_id: str, params_bytes: int):
        body = json.dumps({"id": instance_id, "params": {"blob": "x" * params_bytes}})
        return client.post(base, data=body, headers=headers)

    def exists(instance_id: str) -> bool:
        return client.get(f"{base}/{instance_id}", headers=headers).status_code == 200

    return create, exists


def _take_every_slot() -> list:
    slots = admission._semaphore()
    taken = []
    while slots.acquire(blocking=False):
        taken.append(slots)
    assert taken, "no slot to take"
    return taken


def test_a_second_large_body_is_refused_at_once_while_ordinary_requests_go_on(created):
    create, exists = created
    taken = _take_every_slot()  # a costly body is being worked on in this process
    try:
        refused = create("big-while-busy", 300 * 1024)
        assert refused.status_code == 503, refused.get_data(as_text=True)[:300]
        assert refused.get_json()["error"]["code"] == "backend_unavailable"
        assert refused.headers["Retry-After"] == "1"
        assert not exists("big-while-busy")  # nothing written
        small = create("small-while-busy", 1024)
        assert small.status_code == 201, small.get_data(as_text=True)[:300]
    finally:
        for slots in taken:
            slots.release()
    # Once the slot is free again, large bodies are served — one after another, each giving its
    # slot back when its request ends (also when it fails).
    assert create("big-1", 300 * 1024).status_code == 201
    assert create("big-1", 300 * 1024).status_code == 409  # a failed request releases too
    assert create("big-2", 300 * 1024).status_code == 201
    assert exists("big-1") and exists("big-2")
