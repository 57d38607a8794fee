"""models.resources.is_live: the one "live resource of a Form" condition the services share."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from models import resources as res_models


def _sql(condition: sa.ColumnElement[bool]) -> str:
    compiled = sa.select(res_models.Resource.uid).where(condition).compile(dialect=postgresql.dialect())
    return str(compiled).split("WHERE", 1)[1]


def test_it_always_names_the_form_and_excludes_deleted_rows():
    where = _sql(res_models.is_live("WorkerVersion"))
    assert "resources.form = %(form_1)s" in where
    assert "resources.deleted_at IS NULL" in where
    assert "space" not in where and "worker_uid" not in where and "resources.uid" not in where


def test_it_narrows_only_by_what_is_given():
    where = _sql(res_models.is_live("WorkerDeployment", space="s", worker_uid="w"))
    assert "resources.space = " in where and "resources.worker_uid = " in where
    assert "resources.uid = " not in where
    where = _sql(res_models.is_live("WorkerCronTrigger", space="s", uid="u"))
    assert "resources.uid = " in where and "resources.worker_uid" not in where
