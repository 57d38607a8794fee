"""The servers of one test run: the ones named by ``TAKOHOST_TEST_DATABASE_URL`` /
``TAKOHOST_TEST_REDIS_URL`` (CI, which has servers), else ONE embedded PostgreSQL and ONE
embedded Redis (:mod:`host_cli.embedded`) for the whole run.

The pytest controller process (the only process with ``-n 0``; with xdist, the process that
spawns the workers) calls :func:`start_for_run` before the workers exist: it starts the embedded
servers if no URL is given, migrates a *template* database once, and exports
``TAKOHOST_TEST_DATABASE_URL``, ``TAKOHOST_TEST_REDIS_URL`` and ``TAKOHOST_TEST_TEMPLATE_DB``,
which the xdist workers inherit (execnet starts them with the controller's environment) and so
share. Every database of the run is then ``CREATE DATABASE x TEMPLATE <template>`` (a file copy,
no migration). :func:`stop_for_run` (controller, at the end) drops the template and stops the
embedded servers; they also die with the controller (a parent-death signal) if it is killed.

The embedded servers listen on 127.0.0.1 with generated passwords (so that URLs keep the
``…/dbname`` shape the tests and benchmarks build on), in a ``0700`` directory under the system
temporary directory.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time
import uuid

import sqlalchemy as sa

DATABASE_VAR = "TAKOHOST_TEST_DATABASE_URL"
REDIS_VAR = "TAKOHOST_TEST_REDIS_URL"
TEMPLATE_VAR = "TAKOHOST_TEST_TEMPLATE_DB"
_LEGACY_DATABASE_VAR = "TAKOHOST_TEST_PG"  # the admin URL's former name, still honoured


class _Run:
    directory: pathlib.Path | None = None
    postgres = None
    redis = None
    template: str | None = None
    started_seconds: float | None = None


def admin_url() -> str:
    """The admin URL (database ``postgres``) of the run's server; set by :func:`start_for_run`."""
    return os.environ[DATABASE_VAR]


def database_url(name: str) -> str:
    """The URL of database ``name`` on the run's server."""
    return admin_url().rsplit("/", 1)[0] + "/" + name


def _admin() -> sa.Engine:
    return sa.create_engine(admin_url(), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def create_database(name: str) -> str:
    """Create database ``name`` as a copy of the run's migrated template; returns its URL.

    Retries for a few seconds while the template is busy (PostgreSQL refuses to copy a database
    another session is connected to; only :func:`start_for_run` ever connects to it)."""
    template = os.environ[TEMPLATE_VAR]
    engine = _admin()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with engine.connect() as conn:
                    conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
                break
            except sa.exc.OperationalError as exc:
                if "is being accessed by other users" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        engine.dispose()
    return database_url(name)


def drop_database(name: str) -> None:
    """Drop database ``name`` (disconnecting its sessions); no error if it is gone."""
    engine = _admin()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


def _start_embedded() -> None:
    from host_cli import embedded
    from tests.support import processes

    started = time.monotonic()
    directory = pathlib.Path(tempfile.mkdtemp(prefix="takohost-test-"))
    _Run.directory = directory
    _Run.postgres = embedded.EmbeddedPostgres(
        root=directory / "postgres", log_path=directory / "postgres.log", port=processes.free_port(),
        fast=True, max_connections=400)
    _Run.redis = embedded.EmbeddedRedis(root=directory / "redis", log_path=directory / "redis.log",
                                        port=processes.free_port())
    os.environ[DATABASE_VAR] = _Run.postgres.start()
    os.environ[REDIS_VAR] = _Run.redis.start()
    _Run.started_seconds = time.monotonic() - started


def start_for_run() -> None:
    """Controller only: make sure the run's servers are up and its template database migrated,
    and export their URLs (see the module docstring). Idempotent."""
    if os.environ.get(TEMPLATE_VAR):
        return
    if not os.environ.get(DATABASE_VAR) and os.environ.get(_LEGACY_DATABASE_VAR):
        # The former spelling (README "Production"): its Redis was TAKOHOST_REDIS_URL.
        os.environ[DATABASE_VAR] = os.environ[_LEGACY_DATABASE_VAR]
        os.environ.setdefault(REDIS_VAR, os.environ.get("TAKOHOST_REDIS_URL") or "redis://127.0.0.1:6379/0")
    if not os.environ.get(DATABASE_VAR) or not os.environ.get(REDIS_VAR):
        if os.environ.get(DATABASE_VAR) or os.environ.get(REDIS_VAR):
            raise RuntimeError(f"set both {DATABASE_VAR} and {REDIS_VAR}, or neither (embedded servers)")
        _start_embedded()
    from models import migrate

    template = f"takohost_tmpl_{uuid.uuid4().hex[:10]}"
    engine = _admin()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{template}"'))
    finally:
        engine.dispose()
    migrate.upgrade(database_url(template))
    from models import db as models_db

    models_db.dispose_all()  # no session may stay on the template: it could not be copied
    _Run.template = template
    os.environ[TEMPLATE_VAR] = template


def stop_for_run() -> None:
    """Controller only: drop the template and stop the embedded servers (if this run started
    them) and remove their directory. Idempotent."""
    if _Run.template is not None:
        try:
            drop_database(_Run.template)
        except sa.exc.OperationalError:
            pass
        _Run.template = None
        os.environ.pop(TEMPLATE_VAR, None)
    if _Run.redis is not None:
        _Run.redis.stop()
        _Run.redis = None
    if _Run.postgres is not None:
        _Run.postgres.stop()
        _Run.postgres = None
    if _Run.directory is not None:
        shutil.rmtree(_Run.directory, ignore_errors=True)
        _Run.directory = None


def embedded_start_seconds() -> float | None:
    """How long this process took to start the embedded servers (``None``: it did not)."""
    return _Run.started_seconds
