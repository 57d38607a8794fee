"""The API's URL map, with instance ids routed as raw path segments (docs/spec/http-api.md#api-inst-id).

Instance ids are 1–256 Unicode scalar values and may contain ``/``, ``%``, ``?``, spaces, emoji
or U+0000; a client percent-encodes one as a single path segment. A WSGI server (gunicorn, the
Werkzeug server) percent-decodes ``PATH_INFO``, so ``a%2Fb`` would reach the URL map as two
segments. Two small pieces keep the instance routes in Flask's URL map all the same:

- :class:`InstanceMap`, the app's ``url_map_class`` (:class:`App`): for a request under
  ``/v2/spaces/{space}/resources/{uid}/instances`` it matches the raw request target
  (``RAW_URI`` from gunicorn and the Werkzeug server and test client, or ``REQUEST_URI``), still
  percent-encoded, so the URL map splits it on the client's own ``/``. Only matching sees the
  raw path: ``request.path`` (and so ``host_api.body.request_fingerprint``) stays the decoded one.
- :class:`SegmentConverter` (``<segment:name>`` in a rule): one raw segment, percent-decoded as
  strict UTF-8. A segment that is not UTF-8 becomes :class:`Undecodable`, which
  ``host_api.app.check_path_ids`` answers with ``400 invalid_request`` (after authentication,
  in path order).

Every other route is matched on ``PATH_INFO`` as the server decoded it, exactly as before.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import flask
from werkzeug import routing

#: The raw (or decoded) paths whose ``PATH_INFO`` becomes the raw request target.
INSTANCE_TREE = re.compile(r"^/v2/spaces/[^/]*/resources/[^/]*/instances(?:/|$)")
#: What each ``<segment:…>`` variable names, for the ``invalid_request`` message.
SEGMENT_NAMES = {"space": "Space", "uid": "resource uid", "instance_id": "instance id"}


def raw_path(environ: Mapping[str, Any]) -> str:
    """The request target's path as the client sent it (percent-encoded), without the query,
    fragment or ``SCRIPT_NAME``. Without ``RAW_URI``/``REQUEST_URI`` it re-quotes what the server
    decoded (an id holding ``/`` then cannot be told from two segments)."""
    script = environ.get("SCRIPT_NAME", "")
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw is None:
        return urllib.parse.quote(environ.get("PATH_INFO", ""), safe="/")
    if "://" in raw.split("?", 1)[0]:  # absolute-form request target
        raw = urllib.parse.urlsplit(raw)._replace(scheme="", netloc="").geturl()
    raw = raw.split("?", 1)[0].split("#", 1)[0]
    quoted_script = urllib.parse.quote(script, safe="/")
    if quoted_script and raw.startswith(quoted_script):
        raw = raw[len(quoted_script):]
    return raw


def routing_path(environ: Mapping[str, Any]) -> str | None:
    """The path the URL map matches instead of ``PATH_INFO`` (the raw one), or ``None`` for
    ``PATH_INFO`` itself.

    A request whose decoded path falls under the instance routes but whose raw path does not
    (``…/instances%2Fx``) is matched on its raw path too, so it matches no instance rule (``404``).
    """
    raw = raw_path(environ)
    if INSTANCE_TREE.match(raw) or INSTANCE_TREE.match(environ.get("PATH_INFO", "")):
        return raw
    return None


class InstanceMap(routing.Map):
    """Werkzeug's URL map, matching instance routes on the raw path (:func:`routing_path`)."""

    def bind_to_environ(
        self, environ: Any, server_name: str | None = None, subdomain: str | None = None
    ) -> routing.MapAdapter:
        """``Map.bind_to_environ`` with ``PATH_INFO`` replaced by :func:`routing_path` when it
        applies (``environ`` itself is left alone)."""
        env = getattr(environ, "environ", environ)  # a Request, or a WSGI environ
        path = routing_path(env)
        if path is not None:
            environ = {**env, "PATH_INFO": path}
        return super().bind_to_environ(environ, server_name=server_name, subdomain=subdomain)


class App(flask.Flask):
    """``flask.Flask`` with an :class:`InstanceMap` for its URL map."""

    url_map_class = InstanceMap


class Undecodable:
    """A path segment whose percent-decoding is not UTF-8 (``raw``: the segment as sent)."""

    __slots__ = ("raw",)

    def __init__(self, raw: str) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return repr(self.raw)


class SegmentConverter(routing.UnicodeConverter):
    """``<segment:name>``: one raw path segment (may be empty; ``minlength`` as for ``string``),
    percent-decoded as strict UTF-8 into a ``str``, or an :class:`Undecodable`. Only meaningful
    on rules whose ``PATH_INFO`` :class:`RawInstancePaths` keeps raw."""

    def __init__(self, map: routing.Map, minlength: int = 0, maxlength: int | None = None) -> None:
        super().__init__(map, minlength=minlength, maxlength=maxlength)

    def to_python(self, value: str) -> str | Undecodable:
        """The decoded segment (``value`` is what Werkzeug read from ``PATH_INFO``)."""
        try:
            return urllib.parse.unquote_to_bytes(value).decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            return Undecodable(value)

    def to_url(self, value: object) -> str:
        """``value`` percent-encoded as one segment (every reserved character escaped)."""
        return urllib.parse.quote(str(value), safe="")


def configure(app: flask.Flask) -> None:
    """Set the URL map's options and converters (before any rule is added).

    Routing never redirects (a redirect is an HTML page, docs/spec/http-api.md#api-errors) and each
    route has one spelling: ``//`` is not merged into ``/`` and a trailing slash is not a second
    spelling of a path (strict slashes; the instance collection alone also answers with one, as it
    always did). Rules copy these when added.
    """
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = True
    app.url_map.redirect_defaults = False
    app.url_map.converters["segment"] = SegmentConverter
    if not isinstance(app.url_map, InstanceMap):
        raise TypeError("host_api routes need an app whose url_map_class is routing.InstanceMap (routing.App)")


def path_segment_error(name: str, value: object) -> str | None:
    """The ``invalid_request`` message for path variable ``name`` holding ``value``, or ``None``
    when ``value`` decoded."""
    if isinstance(value, Undecodable):
        return f"the {SEGMENT_NAMES.get(name, name)} in the path is not percent-encoded UTF-8"
    return None
