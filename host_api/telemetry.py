"""HTTP latency by route for the Prometheus metrics (docs/spec/host-features.md#hf-observability; ``services.telemetry.metrics``).

:func:`register` adds the app's first ``before_request`` (start the clock) and an ``after_request``
that observes ``takohost_http_request_duration_seconds{method, route, status}``. ``route`` is the
URL rule (``/v2/spaces/<space>/resources/<uid>``), or for the raw-path instance routes their
template (``/v2/spaces/<space>/resources/<uid>/instances/<id>/events``), or ``unmatched``: never
a raw path, so ids and Space names do not become label values; ``method`` is one of the usual
seven or ``other`` (a client may send any token as its method). No-op when metrics are off.
"""

from __future__ import annotations

import re
import time

import flask

from host_api.routes import instances
from services.telemetry import metrics

_ACTION = re.compile(r"^/[^/]*/(?P<action>[a-z]+)$")


def route_template() -> str:
    """The current request's route as a template (see the module doc)."""
    rule = flask.request.url_rule
    if rule is not None:
        return rule.rule
    match = instances._PREFIX.match(instances._raw_path())
    if match is None:
        return "unmatched"
    base = "/v2/spaces/<space>/resources/<uid>/instances"
    rest = match["rest"]
    if rest is None or rest == "/":
        return base
    action = _ACTION.match(rest)
    if action is not None and action["action"] in instances._ACTIONS:
        return f"{base}/<id>/{action['action']}"
    return f"{base}/<id>"


#: Methods measured under their own name; any other (a client may send any RFC 9110 token) is
#: ``other``, so that a client cannot make a new label set per request.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    """``method`` as the ``method`` label: one of :data:`_METHODS`, else ``"other"``."""
    return method if method in _METHODS else "other"


def _start() -> None:
    flask.g.takohost_started = time.perf_counter()


def _observe(response: flask.Response) -> flask.Response:
    started = getattr(flask.g, "takohost_started", None)
    if started is not None and metrics.enabled():
        metrics.observe(
            "takohost_http_request_duration_seconds",
            time.perf_counter() - started,
            method=method_label(flask.request.method),
            route=route_template(),
            status=str(response.status_code),
        )
    return response


def register(app: flask.Flask) -> None:
    """Time every request of ``app`` (call before any other ``before_request`` is added)."""
    app.before_request_funcs.setdefault(None, []).insert(0, _start)
    app.after_request(_observe)


def gunicorn_logger_class() -> type:
    """gunicorn's ``logger_class`` whose error log ("Listening at", "Booting worker", …) goes
    through the root logger, so it is written in the host's format (``--log-format``) too."""
    from gunicorn import glogging

    class RootLogger(glogging.Logger):
        def setup(self, cfg) -> None:  # noqa: ANN001 - gunicorn's API
            super().setup(cfg)
            self.error_log.handlers.clear()
            self.error_log.propagate = True

    return RootLogger
