"""The integration tier's isolation (``workflows.isolated_database``): a module's database copy
comes with a Redis namespace of its own, because instance pks start at 1 in every copy and two
modules run at once in two xdist processes."""

from __future__ import annotations

import pytest
import redis

from core import config
from tests.support import workflows
from workers.sandbox import lease as lease_mod


def test_two_isolated_databases_never_share_a_lease_key():
    session = config.load_settings().namespace
    with workflows.isolated_database():
        first = config.load_settings()
        leases = lease_mod.store_for(redis_url=first.redis_url, namespace=first.namespace, ttl_ms=5000)
        held = leases.acquire(1)  # instance pk 1 of this copy
        assert held is not None
        with workflows.isolated_database():
            second = config.load_settings()
            other = lease_mod.store_for(redis_url=second.redis_url, namespace=second.namespace, ttl_ms=5000)
            mine = other.acquire(1)  # pk 1 of another copy is another instance: not busy
            assert mine is not None
        assert config.load_settings().namespace == first.namespace  # restored
    assert len({session, first.namespace, second.namespace}) == 3
    assert config.load_settings().namespace == session
    client = redis.Redis.from_url(first.redis_url)
    assert not list(client.scan_iter(match=f"{first.namespace}:*"))  # its keys went with it
    assert not list(client.scan_iter(match=f"{second.namespace}:*"))


def test_a_database_still_open_when_the_next_module_starts_is_refused(db_url):
    """The browser stack was once session-scoped: its database stayed in the environment for every
    later module of the xdist process, whose in-process calls then missed the rows their fixtures
    had written to the session's database ("no such DurableWorkflow in this Space")."""
    assert workflows.ACTIVE_DATABASES  # this module's own copy (tests/integration/conftest.py), open now
    with pytest.raises(RuntimeError, match="still open"):
        workflows.check_none_open("tests/security/test_console_isolation.py")
    saved = list(workflows.ACTIVE_DATABASES)
    workflows.ACTIVE_DATABASES.clear()
    try:
        workflows.check_none_open("tests/security/test_console_isolation.py")  # none open: fine
    finally:
        workflows.ACTIVE_DATABASES[:] = saved
