"""Fixtures of the integration tier: real Postgres, Redis and sandbox children, host code run in
the test process (a real host process only where a test starts one).

Every module runs on a database of its own, cloned from the run's migrated template
(``workflows.isolated_database``: ``TAKOHOST_DATABASE_URL`` points at it while the module runs), so
the real worker and beat processes that e2e modules of the same xdist process start on the
session's database never race an in-process driver, reconciler or cron decision. The fixtures
that follow the database (``app``, ``beat_process``) are per module too.
"""

from __future__ import annotations

import pytest

from tests.support import workflows


@pytest.fixture(scope="module")
def db_url():
    """This module's own database (a copy of the run's migrated template)."""
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def app(db_url: str):
    """The Flask app on this module's database."""
    from host_api.app import create_app

    return create_app()


@pytest.fixture(scope="module")
def beat_process(db_url: str):
    """A real beat process (``takohost beat``) on this module's database."""
    from tests.support import processes

    process = processes.start_beat()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def zygote():
    """A started sandbox zygote for the module."""
    z = workflows.start_zygote()
    yield z
    z.stop()


@pytest.fixture()
def driver(monkeypatch: pytest.MonkeyPatch, zygote, db_url: str):
    """Replay contexts run in the test process (``workflows.Driver``); timers cleared after."""
    yield workflows.Driver(monkeypatch, zygote=zygote)
    workflows.clear_timers(db_url)


@pytest.fixture()
def space(space_token: tuple[str, str]) -> str:
    """A new Space (its token is ``space_token[1]``)."""
    return space_token[0]


@pytest.fixture()
def no_dispatch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record instead of sending the API's reconcile messages; returns the recorded Operation ids
    (tests settle Operations in-process with ``test_resources_support.settle``)."""
    from services import dispatch

    sent: list[str] = []
    monkeypatch.setattr(dispatch, "reconcile_operation", sent.append)
    return sent


@pytest.fixture()
def captured(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record instead of sending cron deliveries; returns the recorded match pks."""
    from workers import cron_tasks

    sent: list[int] = []

    def capture(match_pks: list[int]) -> int:
        sent.extend(match_pks)
        return len(match_pks)

    monkeypatch.setattr(cron_tasks.dispatch, "deliver_cron_matches", capture)
    return sent
