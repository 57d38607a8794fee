"""Documents of any depth (docs/spec/host-features.md#hf-newcomer; docs/spec/host-limits.md#hl-decisions "Document depth"; docs/spec/durable-workflow.md sets no depth
limit): params, step results, event payloads and output nested 10 000 levels and more go through
HTTP, Postgres, the sandbox frames and the engine and come back equal; beyond the byte and key
limits they are refused with one code per fault, whatever the depth.

The real engine runs in-process (``tests.support.workflows.Driver``) against the real database,
Redis and sandbox children; HTTP is the Flask app.
"""

from __future__ import annotations

import time

import pytest

from takohost.domain import deepjson
from tests.support import workflows

DEPTH = 10_000

#: Builds a document ``levels`` deep inside the sandbox (the child's own recursion limit is the
#: interpreter's default): a step result, then waits for an event, returns both and the params.
DEEP = """
def nest(levels, leaf):
    value = leaf
    for index in range(levels - 1):
        value = {"k": value} if index % 2 else [value]
    return {"d": value}


class Deep:
    def __init__(self, env):
        pass

    def run(self, event, step):
        made = step.do("make", lambda: nest(LEVELS, "leaf"))
        got = step.wait_for_event("payload", {"type": "deep", "timeoutSeconds": 600})
        return {"params": event["params"], "made": made, "got": got}
""".replace("LEVELS", str(DEPTH))


def nested_text(levels: int, leaf: str = '"leaf"') -> str:
    """JSON text of ``{"d": …}`` nesting ``levels`` levels (the root is level 1), as ``nest`` builds."""
    opens, closes = [], []
    for index in range(levels - 1):
        if index % 2:
            opens.append('{"k":')
            closes.append("}")
        else:
            opens.append("[")
            closes.append("]")
    return '{"d":' + "".join(reversed(opens)) + leaf + "".join(closes) + "}"


def depth_of(value: object) -> int:
    """Nesting levels of a decoded value (iteratively: the root container is level 1)."""
    levels = 0
    while isinstance(value, (dict, list)):
        levels += 1
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return levels


def _post(client, path, token, text: str):
    return client.post(
        path, data=text.encode("utf-8"), headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"},
    )


def test_params_result_payload_and_output_10000_deep_round_trip(client, space_token, db_url, driver):
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=DEEP, class_name="Deep")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    params = nested_text(DEPTH)
    started = time.perf_counter()
    created = _post(client, base, token, '{"id": "deep", "params": ' + params + "}")
    create_seconds = time.perf_counter() - started
    assert created.status_code == 201, created.get_data(as_text=True)[:300]
    assert driver.run() == ["waiting"]
    sent = _post(client, f"{base}/deep/events", token, '{"type": "deep", "payload": ' + params + "}")
    assert sent.status_code == 202, sent.get_data(as_text=True)[:300]
    assert driver.run() == ["complete"]
    answer = client.get(f"{base}/deep", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    body = deepjson.loads(answer.get_data())
    assert body["status"] == "complete"
    expected = deepjson.loads(params)
    for key in ("params", "made", "got"):
        assert depth_of(body["output"][key]) == DEPTH, key
        assert deepjson.dumps(body["output"][key]) == deepjson.dumps(expected), key
    assert depth_of(body["output"]) == DEPTH + 1
    print(f"\n10 000-deep params: POST in {create_seconds * 1000:.0f} ms")


@pytest.mark.parametrize("levels", [600, 995, 1_100, 50_000])
def test_one_code_per_fault_at_any_depth(client, space_token, db_url, levels):
    """Before: 512-989 levels were ``invalid_params``, 990+ ``invalid_json`` (the recursion limit)."""
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=DEEP, class_name="Deep")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    ok = _post(client, base, token, '{"id": "ok", "params": ' + nested_text(levels) + "}")
    assert ok.status_code == 201, ok.get_data(as_text=True)[:300]
    for leaf, status, code in (
        ("NaN", 400, "invalid_json"),  # not JSON at all
        ('"a" "a"', 400, "invalid_json"),  # not JSON either (syntax)
        ("9007199254740993", 400, "invalid_params"),  # JSON, but not a document
    ):
        answer = _post(client, base, token, '{"params": ' + nested_text(levels, leaf) + "}")
        assert answer.status_code == status and answer.get_json()["error"]["code"] == code, (leaf, levels)
    duplicate = '{"params": ' + nested_text(levels, '{"x": 1, "x": 2}') + "}"
    assert _post(client, base, token, duplicate).get_json()["error"]["code"] == "invalid_json"


def test_the_deepest_documents_within_the_byte_limit_and_beyond(client, space_token, db_url):
    space, token = space_token
    deployed = workflows.deploy(db_url, space=space, source=DEEP, class_name="Deep")
    base = f"/v2/spaces/{space}/resources/{deployed.workflow}/instances"
    # {"d": [[[…]]]} of 1 048 576 canonical bytes: the deepest params there are (524 283 levels)
    levels = (1_048_576 - len('{"d":}')) // 2
    deepest = '{"d":' + "[" * levels + "]" * levels + "}"
    assert len(deepest) == 1_048_576 - (1_048_576 - len('{"d":}')) % 2
    started = time.perf_counter()
    accepted = _post(client, base, token, '{"id": "deepest", "params": ' + deepest + "}")
    seconds = time.perf_counter() - started
    assert accepted.status_code == 201, accepted.get_data(as_text=True)[:300]
    over = '{"d":' + "[" * (levels + 1) + "]" * (levels + 1) + "}"
    refused = _post(client, base, token, '{"params": ' + over + "}")
    assert refused.status_code == 413 and refused.get_json()["error"]["code"] == "document_too_large"
    print(f"\n{levels + 1}-level params (1 MiB): accepted in {seconds:.2f} s")
