"""Fixtures of the e2e tier: the session's real API, worker and beat processes (``api_server``,
``worker``, ``beat_process`` in ``tests/conftest.py``) driven from outside."""

from __future__ import annotations

import pytest

from tests.e2e.test_cli_client import Cli


@pytest.fixture()
def cli(api_server, worker, beat_process, space_token) -> Cli:
    """The ``takohost`` CLI against the session's real host, as a new Space."""
    space, token = space_token
    return Cli(url=api_server.extra["url"], space=space, token=token)
