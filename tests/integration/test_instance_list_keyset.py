"""Keyset pages of the instance list (docs/spec/host-features.md#hf-performance): a page is read from the workflow's (and
status's) own index range, so rows of other workflows and statuses — before, between and after
— are never listed, and pages chain without gaps or repeats."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from models import db as models_db
from services import instances
from services.instance_pages import PageRequest
from tests.support import workflows

SOURCE = """
class K:
    def __init__(self, env): pass
    def run(self, event, step): return {}
"""


@pytest.fixture()
def two_workflows(db_url, space_token):
    space = space_token[0]
    first = workflows.deploy(db_url, space=space, source=SOURCE, class_name="K").workflow
    second = workflows.deploy(db_url, space=space, source=SOURCE, class_name="K").workflow
    now = dt.datetime.now(dt.UTC)
    with models_db.session_scope(db_url) as session:
        # 7 rows of the second workflow first, then the two interleaved, then the second again
        for n in range(40):
            workflow = second if n < 7 or n >= 33 or n % 2 else first
            status = "errored" if n % 3 == 0 else "complete"
            session.execute(sa.text(
                "INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, step_count,"
                " next_event_id, next_sequence, inbox_count, inbox_bytes, created_at, updated_at,"
                " lifetime_ends_at) VALUES (:w, :s, :i, :st, 0, 0, 1, 1, 0, 0, :now, :now, :now)"),
                {"w": workflow, "s": space, "i": f"k{n:02d}".encode(), "st": status, "now": now})
    return space, first


def _all_pages(space, workflow, *, status=None, limit=3):
    ids, token = [], None
    while True:
        page = instances.list_instances(space=space, workflow_uid=workflow, status_filter=status,
                                        page=PageRequest(token, limit))
        assert len(page.instances) <= limit
        ids += [row.id for row in page.instances]
        token = page.next_page_token
        if token is None:
            return ids


def test_pages_list_exactly_the_workflows_rows_in_order(two_workflows):
    space, first = two_workflows
    expected = [f"k{n:02d}" for n in range(7, 33) if n % 2 == 0]
    assert _all_pages(space, first) == expected
    assert _all_pages(space, first, limit=1000) == expected


def test_a_status_filter_pages_its_own_rows_only(two_workflows):
    space, first = two_workflows
    expected = [f"k{n:02d}" for n in range(7, 33) if n % 2 == 0 and n % 3 == 0]
    assert _all_pages(space, first, status="errored") == expected
    assert _all_pages(space, first, status="waiting") == []
