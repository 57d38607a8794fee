"""The plumbing shared by the client commands (``host_cli.client_commands``, ``host_cli.instances``):
the connection options, error reporting and JSON output (CONTRACT §9).

Connection: ``--url``/``TAKOHOST_URL``, ``--token``/``TAKOHOST_TOKEN`` and
``--space``/``TAKOHOST_SPACE`` (:func:`client_command`). Tables are drawn with ``rich`` on stdout;
``--json`` (:func:`json_option`) prints one stable JSON document instead (sorted keys, ASCII,
2-space indent). Progress goes to stderr (:data:`stderr`).

Errors print ``error: <code>: <message>`` on stderr and exit 1 — API errors with the API's code
(CONTRACT §2.4), failed Operations with the Operation's code, a host that does not answer as
``unreachable`` ("cannot reach the host at URL") — never a traceback. Usage errors are click's
(exit 2); Ctrl-C exits 130.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console

from host_cli import client as http
from host_cli import manifest as manifests
from host_cli.errors import CommandFailed
from takohost.domain import deepjson

__all__ = [
    "DEFAULT_SPACE",
    "DEFAULT_URL",
    "client_command",
    "compact",
    "emit_json",
    "json_option",
    "resolve",
    "stderr",
]

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_SPACE = "dev"

stderr = Console(stderr=True, highlight=False)


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
        _fail(exc.code, exc.message, *exc.hints)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # never a traceback (issue 6 item 3)
        _fail("internal_error", f"{type(exc).__name__}: {exc}")


def _fail(code: str, message: str, *hints: str) -> None:
    click.echo(f"error: {code}: {message}", err=True)
    for hint in hints:
        click.echo(f"  {hint}", err=True)
    sys.exit(1)


def _detail_hints(details: dict[str, Any], message: str) -> list[str]:
    pointer = details.get("pointer")
    return [f"at {pointer}"] if isinstance(pointer, str) and pointer and pointer not in message else []


def client_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Add ``--url``, ``--token``, ``--space``; call ``fn(api, **options)`` inside error reporting."""

    @click.option(
        "--url",
        envvar="TAKOHOST_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Base URL of the host API (env TAKOHOST_URL).",
    )
    @click.option(
        "--token",
        envvar="TAKOHOST_TOKEN",
        default=None,
        help="Bearer token (env TAKOHOST_TOKEN; `takohost token create --space S` prints one).",
    )
    @click.option(
        "--space",
        envvar="TAKOHOST_SPACE",
        default=DEFAULT_SPACE,
        show_default=True,
        help="Space the token grants (env TAKOHOST_SPACE).",
    )
    @functools.wraps(fn)
    def wrapper(*, url: str, token: str | None, space: str, **options: Any) -> None:
        with _reported_errors():
            if not token:
                raise CommandFailed(
                    "unauthenticated",
                    "no token: pass --token or set TAKOHOST_TOKEN",
                    "`takohost dev` prints one; or `takohost token create --space SPACE`",
                )
            fn(http.Client(base_url=url, token=token, space=space), **options)

    return wrapper


def json_option(fn: Callable[..., None]) -> Callable[..., None]:
    """Add ``--json`` (passed to ``fn`` as ``as_json: bool``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(fn)


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
    resources = list(api.iter_resources(form=http.FORM_URLS[form]))
    for resource in resources:
        if resource.get("name") == ref:
            return resource["uid"]
    for resource in resources:
        if resource.get("uid") == ref:
            return ref
    raise CommandFailed(
        "not_found",
        f"no {form} named {ref!r} in Space {api.space!r}",
        f"names known: {', '.join(sorted(r['name'] for r in resources)) or '(none)'}",
    )
