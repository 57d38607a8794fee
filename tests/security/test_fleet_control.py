"""The fleet is not controllable from a message (docs/spec/host-features.md#hf-isolation).

An attacker who holds the broker URL (and sees the key prefix in Redis) sends Celery's remote
control commands to a real ``takohost worker``: ``ping`` gets no answer, ``cancel_consumer`` and
``shutdown`` change nothing, and the worker still runs work afterwards. Both pools are checked,
each on a private stack (database, namespace, API, one worker): the attack never reaches other
test sessions' workers, whose namespaces differ.
"""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from core import config
from tests.support import workflows

WORK = """
class Quick:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("echo", lambda: {"echo": event["params"]["n"]})
"""


def _attacker(namespace: str) -> Celery:
    """A Celery app built from nothing but the broker URL and the namespace's key prefix."""
    app = Celery("attacker", broker=config.load_settings().redis_url)
    app.conf.broker_transport_options = {"global_keyprefix": f"{namespace}:"}
    app.conf.broker_connection_retry_on_startup = True
    return app


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_remote_control_commands_from_the_broker_are_ignored(pool):
    with workflows.private_stack(workers=1, worker_pool=pool, beat=False) as stack:
        worker = next(p for p in stack.processes if p.name == "worker")
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=WORK, class_name="Quick")
        http = stack.instances(deployed.workflow)
        attacker = _attacker(stack.namespace)
        try:
            assert attacker.control.ping(timeout=2.0) == []
            assert attacker.control.inspect(timeout=2.0).active_queues() is None
            attacker.control.cancel_consumer(f"{stack.namespace}.tasks", reply=False)  # Settings.queue
            attacker.control.broadcast("shutdown")
            attacker.control.shutdown()
            attacker.control.broadcast("pool_restart", arguments={"reload": True})
            time.sleep(3.0)
            assert worker.alive(), worker.log()[-4000:]
            assert "Got shutdown from remote" not in worker.log()

            # …and it still runs work (the queue is still consumed).
            code, body = http.call("POST", body={"id": "after-attack", "params": {"n": 7}})
            assert code == 201, body
            final = workflows.wait_until(
                lambda: (s := http.status("after-attack"))["status"] in ("complete", "errored") and s,
                timeout=180,
                message="the instance finished after the attack",
            )
            assert final == {"id": "after-attack", "status": "complete", "output": {"echo": 7}}
            assert worker.alive()
            # The worker never joined the control exchange: no pidbox binding in its namespace.
            client = redis.Redis.from_url(config.load_settings().redis_url)
            assert client.smembers(f"{stack.namespace}:_kombu.binding.celery.pidbox") == set()
        finally:
            attacker.close()

