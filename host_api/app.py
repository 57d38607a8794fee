"""Flask app factory (STYLE §6): ``create_app(settings)``; workers and beat never import this."""

from __future__ import annotations

import importlib

import flask

from host_api import auth, errors
from takohost import config

#: Blueprint modules, each exposing ``bp``.
BLUEPRINT_MODULES = (
    "host_api.routes.meta",
    "host_api.routes.resources",
    "host_api.routes.instances",
    "host_api.routes.runs",
)

#: Largest accepted request body: 16 MiB (a WorkerVersion may carry 4 MiB of sources,
#: which JSON escaping can grow several-fold). Larger → 413.
MAX_CONTENT_LENGTH = 16 * 1024 * 1024


def create_app(settings: config.Settings | None = None) -> flask.Flask:
    """Build the API app for ``settings`` (default: from the environment)."""
    settings = settings or config.load_settings()
    app = flask.Flask("takohost")
    app.config.update(
        TAKOHOST_DATABASE_URL=settings.database_url,
        TAKOHOST_SETTINGS=settings,
        MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH,
        JSON_SORT_KEYS=False,
    )
    app.json.ensure_ascii = False
    app.json.sort_keys = False
    errors.register(app)
    app.before_request(auth.authenticate)
    for name in BLUEPRINT_MODULES:
        app.register_blueprint(importlib.import_module(name).bp)
    app.url_map.strict_slashes = False
    return app
