"""The Celery app's Redis transport (``services.broker``, docs/spec/host-features.md#hf-performance): publishing reuses one
Redis client per channel instead of building one per message, and the messages all arrive."""

from __future__ import annotations

import dataclasses
import uuid

import redis
from kombu.transport import redis as kombu_redis

from core import config
from services import broker, celery_app


def test_publishes_reuse_one_client_and_arrive(monkeypatch):
    namespace = f"tkp{uuid.uuid4().hex[:10]}"
    settings = dataclasses.replace(config.load_settings(), namespace=namespace)
    app = celery_app.make_celery(settings)
    built = []
    original = kombu_redis.Channel._create_client

    def counting(self, asynchronous=False):
        client = original(self, asynchronous=asynchronous)
        built.append(asynchronous)
        return client

    monkeypatch.setattr(kombu_redis.Channel, "_create_client", counting)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        assert isinstance(app.connection_for_write().transport, broker.Transport)
        for i in range(20):
            app.send_task("takohost.run_context", args=[i], queue=app.conf.task_default_queue)
        assert client.llen(f"{namespace}:{namespace}.tasks") == 20
        assert built.count(False) <= 2  # one per channel (the producer pool's), not one per message
    finally:
        for key in client.scan_iter(match=f"{namespace}:*"):
            client.delete(key)
        app.close()


def test_other_brokers_keep_kombus_transport():
    assert broker.transport_for("redis://h:6379/0") == "services.broker:Transport"
    assert broker.transport_for("redis+socket:///tmp/r.sock") == "services.broker:Transport"
    assert broker.transport_for("amqp://guest@h//") is None
