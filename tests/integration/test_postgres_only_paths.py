"""The Postgres-only paths left once the SQLite-era fallbacks went (docs/spec/architecture.md#ar-embedded:
one implementation of every statement): a unique violation is named by Postgres's own diagnostics,
UTC columns come back aware from ``timestamptz`` and refuse naive values, and a context task reads
its instance's Space on the raw psycopg connection. Real Postgres (this module's own database)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from core import config
from models import base
from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from services import acceptance
from workers.engine import tasks


def _resource(space: str, name: str) -> res_models.Resource:
    return res_models.Resource(
        uid=str(uuid.uuid4()), space=space, form="ModuleWorker", name=name, spec={}
    )


def test_a_unique_violation_is_named_by_postgres_diagnostics(db_url):
    space = f"s-{uuid.uuid4().hex[:8]}"
    with models_db.session_scope(db_url) as session:
        session.add(res_models.Space(name=space))
        session.flush()
        session.add(_resource(space, "same"))
        session.flush()
        session.add(_resource(space, "same"))
        with pytest.raises(sa_exc.IntegrityError) as caught:
            session.flush()
        session.rollback()
    assert acceptance.constraint_name(caught.value) == "uq_resources_live_name"


def test_utc_columns_come_back_aware_and_refuse_naive_values(db_url):
    space = f"s-{uuid.uuid4().hex[:8]}"
    when = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    with models_db.session_scope(db_url) as session:
        session.add(res_models.Space(name=space))
        session.flush()
        resource = _resource(space, "timed")
        resource.observed_at = when
        session.add(resource)
        session.commit()
        uid = resource.uid
    with models_db.session_scope(db_url) as session:
        table = res_models.Resource.__table__
        stored = session.scalar(sa.select(table.c.observed_at).where(table.c.uid == uid))
    assert stored == when and stored.tzinfo == dt.UTC
    with pytest.raises(ValueError, match="naive"):
        base.UTCDateTime().process_bind_param(dt.datetime(2026, 3, 1), dialect=None)  # type: ignore[arg-type]


def test_the_context_task_reads_the_space_on_postgres_and_remembers_it(db_url, monkeypatch):
    monkeypatch.setenv("TAKOHOST_DATABASE_URL", db_url)
    settings = config.load_settings()
    with models_db.session_scope(db_url) as session:
        instance = inst_models.Instance(
            workflow_uid=str(uuid.uuid4()),
            space="space-of-test",
            instance_id="i-1",
            lifetime_ends_at=base.utcnow() + dt.timedelta(days=1),
        )
        session.add(instance)
        session.commit()
        pk = instance.pk
    tasks._spaces.clear()
    assert tasks.space_of(pk, settings) == "space-of-test"
    assert tasks._spaces[(settings.database_url, pk)] == "space-of-test"
    assert tasks.space_of(pk + 1_000_000, settings) is None
