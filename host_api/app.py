"""Flask app factory (docs/spec/house-rules.md#hr-layers): ``create_app(settings)``; workers and beat never import this."""

from __future__ import annotations

import flask
import flask.json.provider
from werkzeug.middleware import proxy_fix

from core import config
from host_api import admission, auth, errors, routing, telemetry
from host_api.routes import instances, meta, resources, runs, spaces
from host_api.ui import views as ui_views
from services import ids
from takohost.domain import deepjson

#: The API's blueprints, registered in this order.
BLUEPRINTS = (meta.bp, resources.bp, instances.bp, runs.bp, spaces.bp, ui_views.bp)

#: Largest accepted request body: 16 MiB (a WorkerVersion may carry 4 MiB of sources,
#: which JSON escaping can grow several-fold). Larger → 413.
MAX_CONTENT_LENGTH = 16 * 1024 * 1024
#: ``Strict-Transport-Security`` of every answer over HTTPS: one year (browsers then refuse
#: plain HTTP to this host, so a network attacker cannot strip TLS from the console's cookie).
HSTS = "max-age=31536000"


class DeepJSONProvider(flask.json.provider.DefaultJSONProvider):
    """Flask's JSON provider, for answers holding documents of any depth (docs/spec/host-features.md#hf-newcomer): a
    value too deep for the stdlib encoder is written by ``takohost.domain.deepjson`` instead."""

    def dumps(self, obj: object, **kwargs: object) -> str:
        """``DefaultJSONProvider.dumps``, or the iterative encoder past the recursion limit."""
        try:
            return super().dumps(obj, **kwargs)
        except RecursionError:
            return deepjson.dumps(obj, ensure_ascii=self.ensure_ascii)


def create_app(settings: config.Settings | None = None) -> flask.Flask:
    """Build the API app for ``settings`` (default: from the environment)."""
    settings = settings or config.load_settings()
    app = routing.App("takohost", static_folder=None)  # no /static route (it would answer OPTIONS itself)
    app.config.update(
        TAKOHOST_DATABASE_URL=settings.database_url,
        TAKOHOST_SETTINGS=settings,
        MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH,
        JSON_SORT_KEYS=False,
        # No automatic OPTIONS (an empty 200 with an HTML content type): OPTIONS is a method the
        # API does not serve, so it is a JSON 405 with Allow like any other (§2.4).
        PROVIDE_AUTOMATIC_OPTIONS=False,
    )
    app.json = DeepJSONProvider(app)
    app.json.ensure_ascii = False
    app.json.sort_keys = False
    routing.configure(app)  # before any rule: no redirects, one spelling, raw instance ids
    errors.register(app)
    app.before_request(auth.authenticate)
    app.before_request(check_path_ids)
    app.teardown_request(admission.release)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    telemetry.register(app)  # HTTP latency by route (first before_request, last after_request)
    app.after_request(_hsts)
    if settings.trusted_proxies:
        # Behind N TLS-terminating proxies: the scheme, host, port and client address each take
        # the Nth value from the right of X-Forwarded-*; without the setting they are ignored
        # (a client could otherwise claim HTTPS or another host).
        n = settings.trusted_proxies
        app.wsgi_app = proxy_fix.ProxyFix(  # type: ignore[method-assign]  # Flask's documented middleware form
            app.wsgi_app, x_for=n, x_proto=n, x_host=n, x_port=n
        )
    if any(getattr(rule, "provide_automatic_options", False) for rule in app.url_map.iter_rules()):
        raise RuntimeError("this Flask still answers OPTIONS by itself: host_api needs Flask 3.1+")
    return app


def _hsts(response: flask.Response) -> flask.Response:
    """``after_request``: ``Strict-Transport-Security`` on every answer to an HTTPS request."""
    if flask.request.is_secure:
        response.headers["Strict-Transport-Security"] = HSTS
    return response


#: URL-map path parameters that hold host-generated ids, and what they name.
PATH_ID_PARAMS = {"uid": "resource", "op_id": "Operation"}


def check_path_ids() -> None:
    """``before_request`` (after authentication): the path variables in path order, each a
    ``<segment:…>`` that percent-decodes as UTF-8 (``400 invalid_request`` otherwise) and, for a
    ``{uid}`` or ``{op_id}``, with the shape of an id the host issued (``services.ids``; ``404
    not_found`` otherwise, before any query).

    Raises:
        DomainError: ``invalid_request`` or ``not_found``.
    """
    for param, value in (flask.request.view_args or {}).items():
        message = routing.path_segment_error(param, value)
        if message is not None:
            raise errors.ApiError("invalid_request", message)
        if param in PATH_ID_PARAMS:
            ids.require_host_id(value, what=PATH_ID_PARAMS[param])


def url_map_app() -> flask.Flask:
    """A bare app holding the API's URL map and views (no settings, hooks or database): what
    ``host_api.openapi`` reads the routes from."""
    app = routing.App("takohost", static_folder=None)
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    routing.configure(app)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    return app
