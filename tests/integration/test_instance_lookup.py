"""Every call on one instance finds it the same way (``services.instance_common.workflow_instance_txn``):
no live DurableWorkflow of that uid in the caller's Space is ``not_found`` (checked first: an
instance of another Space's workflow is not found either), then an id it has no instance of is
``unknown_instance`` — the same codes and messages from each service (docs/spec/http-api.md#api-errors)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models.errors import DomainError
from services import (
    console,
    instance_events,
    instance_history,
    instance_progress,
    instance_stop,
    instances,
    tenant_logs,
    tokens,
)
from tests.support import workflows

SOURCE = """
class F:
    def __init__(self, env): pass
    def run(self, event, step): return None
"""

NOT_FOUND = ("not_found", "no such DurableWorkflow in this Space")
UNKNOWN = ("unknown_instance", "no such instance (unknown, or no longer retained)")


def _in_session(read):
    def call(**ids):
        with models_db.session_scope() as session:
            return read(session, **ids)

    return call


CALLS = [
    pytest.param(instances.get, id="get"),
    pytest.param(instances.describe, id="describe"),
    pytest.param(instances.status, id="status"),
    pytest.param(instance_progress.progress, id="progress"),
    pytest.param(instance_events.inbox, id="inbox"),
    pytest.param(instance_history.history, id="history"),
    pytest.param(tenant_logs.instance_logs, id="logs"),
    pytest.param(instance_stop.terminate, id="terminate"),
    pytest.param(_in_session(console.instance_detail_txn), id="console-detail"),
    pytest.param(_in_session(console.instance_version_txn), id="console-version"),
]


@pytest.fixture(scope="module")
def deployed(db_url):
    """A workflow in a Space with one waiting instance ``i-1``: ``(space, workflow uid)``."""
    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        tokens.create_token_txn(session, space=space)
    workflow = workflows.deploy(db_url, space=space, source=SOURCE, class_name="F").workflow
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with models_db.session_scope(db_url) as session:
        session.execute(sa.insert(inst_models.Instance), [{
            "workflow_uid": workflow, "space": space, "instance_id": "i-1", "status": "waiting", "epoch": 0,
            "created_at": t0, "updated_at": t0, "lifetime_ends_at": t0 + dt.timedelta(days=365),
            "step_count": 0, "next_event_id": 1, "next_sequence": 1, "inbox_count": 0, "inbox_bytes": 0,
        }])
    return space, workflow


def _refusal(call, **ids) -> tuple[str, str]:
    with pytest.raises(DomainError) as caught:
        call(**ids)
    return caught.value.code, caught.value.message


@pytest.mark.parametrize("call", CALLS)
def test_the_workflow_is_looked_up_first_then_the_instance(call, deployed):
    space, workflow = deployed
    assert _refusal(call, space=space, workflow_uid="no-such-workflow", instance_id="i-1") == NOT_FOUND
    assert _refusal(call, space="another-space", workflow_uid=workflow, instance_id="i-1") == NOT_FOUND
    assert _refusal(call, space="another-space", workflow_uid=workflow, instance_id="i-2") == NOT_FOUND
    assert _refusal(call, space=space, workflow_uid=workflow, instance_id="i-2") == UNKNOWN
