"""HTTP latency by route for the Prometheus metrics (docs/spec/host-features.md#hf-observability; ``services.telemetry.metrics``).

:func:`register` adds the app's first ``before_request`` (start the clock) and an ``after_request``
that observes ``takohost_http_request_duration_seconds{method, route, status}``. ``route`` is the
URL rule without converters (``/v2/spaces/<space>/resources/<uid>``; an instance id is ``<id>``,
as dashboards have always seen it: ``…/instances/<id>/events``), or ``unmatched``: never a raw
path, so ids and Space names do not become label values; ``method`` is one of the usual seven or
``other`` (a client may send any token as its method). No-op when metrics are off.
"""

from __future__ import annotations

import re
import time

import flask

from services.telemetry import metrics

_VARIABLE = re.compile(r"<(?:[^:>]+:)?([^>]+)>")
#: Rule variables labelled under another name.
_LABEL_NAMES = {"instance_id": "id"}


def route_template() -> str:
    """The current request's route as a template (see the module doc)."""
    rule = flask.request.url_rule
    if rule is None:
        return "unmatched"
    return _VARIABLE.sub(lambda m: f"<{_LABEL_NAMES.get(m[1], m[1])}>", rule.rule)


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
