"""The answer schemas views dump through (``host_api.schemas._Answer``): a key the schema does
not declare fails loudly rather than vanishing from the answer (and from the OpenAPI document)."""

from __future__ import annotations

import pytest

from host_api import schemas

OPERATION = {
    "id": "op", "kind": "check", "resourceUid": "u", "generation": 2, "state": "running",
    "progress": {"checked": 1, "total": 2, "totals": {}}, "createdAt": "t0", "updatedAt": "t1",
}


def test_a_replay_check_operation_dumps_unchanged():
    assert schemas.OperationView().dump(OPERATION) == OPERATION
    failed = {**OPERATION, "state": "failed", "error": {"code": "c", "message": "m", "details": {"x": [1]}}}
    assert schemas.OperationView().dump(failed) == failed


@pytest.mark.parametrize("schema, value", [
    (schemas.OperationView, {**OPERATION, "surprise": 1}),
    (schemas.OperationView, {**OPERATION, "error": {"code": "c", "message": "m", "hint": "h"}}),
    (schemas.ResourceList, {"resources": [{"uid": "u", "secret": "s"}]}),
    (schemas.InstanceId, {"id": "x", "status": "queued"}),
    (schemas.TerminateAnswer, {"status": "terminated", "by": "me"}),
])
def test_an_undeclared_key_raises_instead_of_vanishing(schema, value):
    with pytest.raises(ValueError, match="does not declare"):
        schema().dump(value)
