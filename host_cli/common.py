"""The plumbing shared by the client commands (``host_cli.client_commands``, ``host_cli.instances``):
the connection options, error reporting and JSON output (docs/spec/architecture.md#ar-operating).

Connection: ``--url``/``TAKOHOST_URL``, ``--token``/``TAKOHOST_TOKEN`` and
``--space``/``TAKOHOST_SPACE`` (:func:`client_command`); without a URL or token, those of a
``takohost dev`` running in ``./.takohost`` (:mod:`host_cli.devinfo`). Tables are drawn with ``rich`` on stdout;
``--json`` (:func:`json_option`) prints one stable JSON document instead (sorted keys, ASCII,
2-space indent). Progress goes to stderr (:data:`stderr`).

Errors print ``error: <code>: <message>`` on stderr and exit 1 — API errors with the API's code
(docs/spec/http-api.md#api-errors), failed Operations with the Operation's code, a host that does not answer as
``unreachable`` ("cannot reach the host at URL") — never a traceback. Usage errors are click's
(exit 2); Ctrl-C exits 130 (``interrupted``). Tables fill the terminal, and are never cut
when written to a file or pipe (:func:`stdout_console`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console

from host_cli import client as http
from host_cli import devinfo
from host_cli import manifest as manifests
from host_cli.errors import CommandFailed
from takohost.domain import deepjson

__all__ = [
    "DEFAULT_SPACE",
    "DEFAULT_URL",
    "client_command",
    "compact",
    "console_url",
    "emit_json",
    "json_client_command",
    "json_option",
    "resolve",
    "resolve_named",
    "stderr",
    "stdout_console",
]

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_SPACE = "dev"

stderr = Console(stderr=True, highlight=False)

#: Columns of a table written to a file or a pipe (no terminal to fit): wide enough that no cell
#: is cut or wrapped (docs/spec/host-features.md#hf-console).
PIPE_WIDTH = 100_000


def stdout_console(**options: Any) -> Console:
    """A ``rich`` console on stdout: the terminal's width on a terminal, else :data:`PIPE_WIDTH`
    (whatever ``COLUMNS`` says), so that ``takohost … > file`` keeps whole rows, never ``…``."""
    if "width" not in options and not sys.stdout.isatty():
        options["width"] = PIPE_WIDTH
    return Console(**options)


@contextlib.contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn every failure into ``error: code: message`` on stderr and an exit status."""
    try:
        yield
    except http.ClientError as exc:
        _fail(exc.code, exc.message, *_detail_hints(exc.details, exc.message))
    except manifests.ManifestError as exc:
        _fail("invalid_manifest", str(exc))
    except CommandFailed as exc:
        _fail(exc.code, exc.message, *exc.hints, status=exc.exit_status)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # never a traceback (docs/spec/host-features.md#hf-one-command)
        _fail("internal_error", f"{type(exc).__name__}: {exc}")


def _fail(code: str, message: str, *hints: str, status: int = 1) -> None:
    click.echo(f"error: {code}: {message}", err=True)
    for hint in hints:
        click.echo(f"  {hint}", err=True)
    sys.exit(status)


def _detail_hints(details: dict[str, Any], message: str) -> list[str]:
    pointer = details.get("pointer")
    return [f"at {pointer}"] if isinstance(pointer, str) and pointer and pointer not in message else []


def client_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Add ``--url``, ``--token``, ``--space``; call ``fn(api, **options)`` inside error reporting."""

    @click.option(
        "--url",
        envvar="TAKOHOST_URL",
        default=None,
        help=f"Base URL of the host API (env TAKOHOST_URL; default: the `takohost dev` running in "
             f"./{devinfo.DEFAULT_DATA_DIR}, else {DEFAULT_URL}).",
    )
    @click.option(
        "--token",
        envvar="TAKOHOST_TOKEN",
        default=None,
        help="Bearer token (env TAKOHOST_TOKEN; default: the running `takohost dev`'s; "
             "`takohost token create --space S` prints one).",
    )
    @click.option(
        "--space",
        envvar="TAKOHOST_SPACE",
        default=DEFAULT_SPACE,
        show_default=True,
        help="Space the token grants (env TAKOHOST_SPACE).",
    )
    @functools.wraps(fn)
    def wrapper(*, url: str | None, token: str | None, space: str, **options: Any) -> None:
        with _reported_errors():
            url, token = _connection(url, token)
            if not token:
                raise CommandFailed(
                    "unauthenticated",
                    "no token: pass --token or set TAKOHOST_TOKEN",
                    "`takohost dev` prints one (and commands run in its directory use it); "
                    "or `takohost token create --space SPACE`",
                )
            fn(http.Client(base_url=url, token=token, space=space), **options)

    return wrapper


def _connection(url: str | None, token: str | None) -> tuple[str, str | None]:
    """``(url, token)``: the ones given, else a ``takohost dev`` running in ``./.takohost``
    (its URL when no URL was given; its token when none was and the URL is its own), else
    :data:`DEFAULT_URL` and no token."""
    if url and token:
        return url, token
    dev = devinfo.find_running()
    if dev is None:
        return url or DEFAULT_URL, token
    url = url or dev.url
    if not token and url.rstrip("/") == dev.url.rstrip("/"):
        token = dev.token
    return url, token


def json_option(fn: Callable[..., None]) -> Callable[..., None]:
    """Add ``--json`` (passed to ``fn`` as ``as_json: bool``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(fn)


def json_client_command(fn: Callable[..., None]) -> Callable[..., None]:
    """A :func:`client_command` with :func:`json_option`: ``fn(api, as_json=…, **options)``, the
    shape of every command that prints a JSON document on request."""
    return json_option(client_command(fn))


def emit_json(value: Any) -> None:
    """Print ``value`` on stdout as the stable ``--json`` document (sorted keys, ASCII, indent 2)."""
    try:
        click.echo(json.dumps(value, sort_keys=True, indent=2, ensure_ascii=True))
    except RecursionError:  # a document deeper than the stdlib encoder goes: compact, as it is
        click.echo(deepjson.dumps(value, ensure_ascii=True))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters (but tab and newline) written as ``\\xNN``: text a tenant
    wrote (a log line, an exception message, an output) cannot repaint or retitle the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def compact(value: Any) -> str:
    """``value`` as one line of JSON for a table cell (sorted keys, non-ASCII kept)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    except RecursionError:
        return deepjson.dumps(value)


def resolve(api: http.Client, ref: str, *, form: str) -> str:
    """A resource of ``form`` named ``ref`` (or with UID ``ref``) → its UID; ``not_found`` otherwise.

    ``form`` is a short Form name (a key of :data:`host_cli.client.FORM_URLS`). Raises
    :class:`CommandFailed` (``not_found``, with the known names as a hint) or ``ClientError``.
    """
    return resolve_named(api, ref, form=form)[0]


def resolve_named(api: http.Client, ref: str, *, form: str) -> tuple[str, str]:
    """``(uid, name)`` of the resource :func:`resolve` finds."""
    resources = list(api.iter_resources(form=http.FORM_URLS[form]))
    for resource in resources:
        if resource.get("name") == ref:
            return resource["uid"], ref
    for resource in resources:
        if resource.get("uid") == ref:
            return ref, resource.get("name", ref)
    raise CommandFailed(
        "not_found",
        f"no {form} named {ref!r} in Space {api.space!r}",
        f"names known: {', '.join(sorted(r['name'] for r in resources)) or '(none)'}",
    )


def console_url(api: http.Client, *, workflow: str, instance_id: str | None = None) -> str:
    """The web console's page of DurableWorkflow ``workflow`` (a name), or of one of its instances:
    ``{url}/ui/workflows/{workflow}[/instance?id=…]``."""
    page = f"{api.base_url}/ui/workflows/{urllib.parse.quote(workflow, safe='')}"
    if instance_id is None:
        return page
    return f"{page}/instance?{urllib.parse.urlencode({'id': instance_id})}"
