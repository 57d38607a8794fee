"""Test session set-up: the run's servers, a database cloned from the run's migrated template
per test process, a private Redis namespace, and fixtures for tokens, the Flask client and real
host processes.

Servers (``tests/support/servers.py``): ``TAKOHOST_TEST_DATABASE_URL`` (admin URL, database
``postgres``) and ``TAKOHOST_TEST_REDIS_URL`` when set (CI; the former ``TAKOHOST_TEST_PG`` is
still read), else one embedded PostgreSQL and one embedded Redis for the whole run, started by
the pytest controller and shared by the xdist workers.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import uuid
import warnings

import pytest
import sqlalchemy as sa

from tests.support import schedule, servers

_RUN = uuid.uuid4().hex[:10]
# An xdist worker inherits the template from its controller; a pytest started from inside a test
# (with PYTEST_XDIST_WORKER in its environment but no template) is a controller of its own.
_CONTROLLER = not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(servers.TEMPLATE_VAR))
if _CONTROLLER:
    servers.start_for_run()  # before xdist starts the workers: they inherit the URLs
ADMIN_URL = servers.admin_url()
DB_NAME = f"takohost_test_{_RUN}"
DB_URL = servers.database_url(DB_NAME)

# Settings are read from the environment at import time by the Celery app: set them first.
os.environ["TAKOHOST_DATABASE_URL"] = DB_URL
os.environ["TAKOHOST_NAMESPACE"] = f"tkt{_RUN}"
#: What the session's own processes and app run on. A session fixture is created when a test first
#: asks for it, which may be while a module's private database is in the environment
#: (``workflows.isolated_database``, ``private_stack``): they must never take that one.
SESSION_ENV = {"TAKOHOST_DATABASE_URL": DB_URL, "TAKOHOST_NAMESPACE": f"tkt{_RUN}"}
os.environ["TAKOHOST_REDIS_URL"] = os.environ[servers.REDIS_VAR]
os.environ.pop("TAKOHOST_BROKER_URL", None)
os.environ.setdefault("TAKOHOST_SWEEP_INTERVAL_S", "1")
# The test-only "internet" (README "Test-only settings"): tests serve it on loopback addresses of
# this range (tests/support/egress.py); 127.0.0.1 and the host's services stay refused.
os.environ.setdefault("TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS", "127.0.0.0/24")
# Package layers of this run (docs/packages.md): outside the test-only directory every sandbox
# shares read-write, so a context sees only the read-only layers mount. Removed at the end.
# The wheelhouse the run's host processes install from (tests add wheels they build to it; no
# registry): integration tests that install in-process point TAKOHOST_WHEELHOUSE at their own.
if _CONTROLLER:
    os.environ["TAKOHOST_PACKAGE_DIR"] = tempfile.mkdtemp(prefix="takohost-test-packages-")
    os.environ["TAKOHOST_WHEELHOUSE"] = tempfile.mkdtemp(prefix="takohost-test-wheelhouse-")


def pytest_terminal_summary(terminalreporter) -> None:
    """Say which servers the run used (and how long embedded ones took to start)."""
    seconds = servers.embedded_start_seconds()
    if _CONTROLLER and seconds is not None:
        terminalreporter.write_line(f"embedded PostgreSQL and Redis for this run: started in {seconds:.2f} s")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops what it started (the workers are gone by then)."""
    if _CONTROLLER:
        servers.stop_for_run()
        from workers.packages import layers

        for variable, prefix in (
            ("TAKOHOST_PACKAGE_DIR", "takohost-test-packages-"),
            ("TAKOHOST_WHEELHOUSE", "takohost-test-wheelhouse-"),
        ):
            path = os.environ.get(variable, "")
            if os.path.basename(path).startswith(prefix):
                layers.discard(path)


# Scheduling (tests/support/schedule.py): longest files first, from the last run's durations.
_DURATIONS = schedule.Durations()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    schedule.order_items(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "loadfile":
        return schedule.LongestFirstScheduling(config, log)
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _CONTROLLER:
        _DURATIONS.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _CONTROLLER:
        _DURATIONS.save(session.config)


@pytest.fixture(scope="session", autouse=True)
def sandbox_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test-only ``TAKOHOST_TEST_SANDBOX_SHARED_DIR``: this session's pytest base temporary
    directory, read-write at the same path inside every sandbox (README "Test-only settings"), so
    tests can hand tenant code a ``tmp_path`` file to write and observe it from outside. Set
    before any zygote or host process of the session starts."""
    base = tmp_path_factory.getbasetemp()
    os.chmod(base, 0o1777)  # sandbox identities are not root: they need a writable directory
    os.environ["TAKOHOST_TEST_SANDBOX_SHARED_DIR"] = str(base)
    return str(base)


@pytest.fixture(autouse=True)
def _sandbox_writable_tmp_path(request: pytest.FixtureRequest) -> None:
    """Make a test's ``tmp_path`` writable by sandbox identities (only when the test uses it)."""
    if "tmp_path" in request.fixturenames:
        os.chmod(request.getfixturevalue("tmp_path"), 0o1777)


def _admin() -> sa.Engine:
    return sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


@pytest.fixture(scope="session")
def db_url() -> str:
    """URL of this test process's fresh database: a copy of the run's migrated template."""
    servers.create_database(DB_NAME)
    yield DB_URL
    from models import db as models_db

    models_db.dispose_all()
    servers.drop_database(DB_NAME)


@pytest.fixture()
def space_token(db_url: str) -> tuple[str, str]:
    """A new Space and a token for it: ``(space, token)``."""
    from models import db as models_db
    from services import tokens

    space = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    return space, token


@pytest.fixture(scope="session")
def app(db_url: str):
    """The Flask app on this session's database (whatever database the environment names now)."""
    from core import config
    from host_api.app import create_app

    return create_app(dataclasses.replace(config.load_settings(), database_url=DB_URL,
                                          namespace=SESSION_ENV["TAKOHOST_NAMESPACE"]))


@pytest.fixture()
def client(app):
    """A Flask test client (in-process; e2e tests use a real server)."""
    return app.test_client()


@pytest.fixture(scope="session")
def worker(db_url: str):
    """One real Celery worker process for the session (``takohost worker``)."""
    from tests.support import processes

    process = processes.start_worker(concurrency=2, env=SESSION_ENV)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def beat_process(db_url: str):
    """One real beat process for the session (``takohost beat``)."""
    from tests.support import processes

    process = processes.start_beat(env=SESSION_ENV)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def api_server(db_url: str):
    """One real API server process (gunicorn) for the session: its base URL is ``.extra['url']``."""
    from tests.support import processes

    process = processes.start_api(env=SESSION_ENV)
    yield process
    process.stop()


_MODULE = {"current": None}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """As each test module starts (the last one's module fixtures are torn down by then), no
    isolated database may still be open (``workflows.check_none_open``)."""
    module = item.nodeid.split("::", 1)[0]
    if module != _MODULE["current"]:
        _MODULE["current"] = module
        from tests.support import workflows

        workflows.check_none_open(module)


@pytest.fixture(autouse=True)
def _database_environment(request):
    """Before each test, the environment names the database it should: the innermost open
    ``workflows.isolated_database`` block's, else the session's. A test or fixture that left it
    pointing elsewhere would make later tests create rows in one database and read another
    ("unknown token", "no such DurableWorkflow"): it is put right, and said loudly."""
    from tests.support import workflows

    url, namespace = (workflows.ACTIVE_DATABASES[-1] if workflows.ACTIVE_DATABASES
                      else (SESSION_ENV["TAKOHOST_DATABASE_URL"], SESSION_ENV["TAKOHOST_NAMESPACE"]))
    found = (os.environ.get("TAKOHOST_DATABASE_URL"), os.environ.get("TAKOHOST_NAMESPACE"))
    if found != (url, namespace):
        warnings.warn(f"{request.node.nodeid}: the environment named {found}, not {(url, namespace)}; "
                      "put right (a test or fixture before it left it changed)", stacklevel=1)
        os.environ["TAKOHOST_DATABASE_URL"], os.environ["TAKOHOST_NAMESPACE"] = url, namespace
    yield
