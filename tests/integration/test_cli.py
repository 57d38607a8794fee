"""The operator CLI (CONTRACT §9): ``db upgrade`` and ``token create`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import sqlalchemy as sa


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "takohost.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_token_create_prints_the_token_alone_and_it_authenticates(db_url, client):
    space = f"cli{uuid.uuid4().hex[:8]}"
    result = _cli("token", "create", "--space", space)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tko_")
    response = client.get(f"/v2/spaces/{space}/resources", headers={"Authorization": f"Bearer {lines[0]}"})
    assert response.status_code == 200, response.get_json()


def test_token_create_rejects_a_bad_space_name_without_traceback(db_url):
    result = _cli("token", "create", "--space", "Bad Space!")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "invalid_request" in result.stderr


def test_db_upgrade_on_a_new_database(db_url):
    from tests.conftest import ADMIN_URL

    name = f"takohost_cli_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        result = _cli("db", "upgrade", env={"TAKOHOST_DATABASE_URL": url})
        assert result.returncode == 0, result.stderr
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        engine.dispose()
        assert {"resources", "operations", "instances", "steps", "cron_matches"} <= tables
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_worker_solo_pool_refuses_a_concurrency_it_cannot_give():
    result = _cli("worker", "--pool", "solo", "--concurrency", "2")
    assert result.returncode == 2
    assert "--pool solo runs one task at a time" in result.stderr
    assert "Traceback" not in result.stderr
