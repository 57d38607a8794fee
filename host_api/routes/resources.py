"""Routes of this concept; filled in by its issue."""

from __future__ import annotations

import flask

bp = flask.Blueprint("resources", __name__)
