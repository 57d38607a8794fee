"""Sessions for request handlers (the API opens them from ``models.db`` directly)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import flask
from sqlalchemy import orm

from models import db as models_db


@contextlib.contextmanager
def session() -> Iterator[orm.Session]:
    """A session on the app's database; commit on success, roll back on error."""
    with models_db.session_scope(flask.current_app.config["TAKOHOST_DATABASE_URL"]) as s:
        yield s
