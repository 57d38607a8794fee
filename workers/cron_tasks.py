"""Cron delivery: the ``takohost.deliver_cron_match`` task and the undelivered-match sweep.

Seed 003: once a match is recorded the Host owes at least one handler call; a raised error, a
failed awaitable or a failed ``wait_until`` is a failed run, never retried for that reason;
a delivery whose worker died is delivered again with the identical event (CB-03).

A delivery holds the Redis lease ``{namespace}:cronlease:{match_pk}`` (``SET NX PX``, renewed
by a heartbeat thread) from before its ``cron_deliveries`` row is written until after that row
is finished. So "unfinished delivery row and no lease" proves the worker vanished: the sweep
finishes such a delivery ``unknown`` and dispatches the match again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid

import redis

from models import db as models_db
from models.base import utcnow
from models.errors import DomainError
from takohost import config, errors
from takohost.runtime import protocol
from workers import dispatch
from workers.celery_app import app
from workers.engine import sandbox
from workers.services import cron_runs, instance_bindings

log = logging.getLogger(__name__)

#: A pending match with no running delivery is dispatched again after this long (a message
#: lost between commit and broker, a beat that died before dispatching, an infrastructure error).
REDISPATCH_AFTER = dt.timedelta(seconds=30)
#: Pending matches examined per sweep query.
SWEEP_BATCH = 500

# KEYS[1] = lease key, ARGV[1] = expected value, ARGV[2] = ttl ms.
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

_clients: dict[tuple[int, str], redis.Redis] = {}


def redis_client(url: str) -> redis.Redis:
    """This process's Redis client for ``url`` (a new one after ``fork``)."""
    key = (os.getpid(), url)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return client


def lease_key(namespace: str, match_pk: int) -> str:
    """The Redis key of the delivery lease of ``match_pk``."""
    return f"{namespace}:cronlease:{match_pk}"


def worker_id() -> str:
    """This worker process: ``{hostname}:{pid}``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclasses.dataclass
class DeliveryLease:
    """A held delivery lease, renewed every third of ``ttl_ms`` by a daemon thread until ``release``."""

    client: redis.Redis
    key: str
    value: str
    ttl_ms: int
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def acquire(cls, client: redis.Redis, *, key: str, ttl_ms: int) -> DeliveryLease | None:
        """``SET key value NX PX ttl``; the started lease, or None when another delivery holds it."""
        value = f"{worker_id()}:{uuid.uuid4().hex}"
        if not client.set(key, value, nx=True, px=ttl_ms):
            return None
        lease = cls(client=client, key=key, value=value, ttl_ms=ttl_ms)
        lease._thread = threading.Thread(target=lease._heartbeat, name=f"cronlease:{key}", daemon=True)
        lease._thread.start()
        return lease

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not self.client.eval(_RENEW, 1, self.key, self.value, self.ttl_ms):
                    log.warning(
                        "cron delivery lease lost; the match may be delivered twice", extra={"key": self.key}
                    )
                    return
            except redis.RedisError:
                log.warning("cron delivery lease renewal failed", extra={"key": self.key}, exc_info=True)

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.client.eval(_RELEASE, 1, self.key, self.value)
        except redis.RedisError:
            log.warning(
                "cron delivery lease release failed; it expires", extra={"key": self.key}, exc_info=True
            )


@app.task(name=dispatch.DELIVER_CRON_MATCH, acks_late=True, ignore_result=True)
def deliver_cron_match(match_pk: int) -> str:
    """Celery task ``takohost.deliver_cron_match``: deliver recorded match ``match_pk`` once.

    Returns what happened (``ok``, ``failed``, ``done``: nothing owed, ``busy``: another delivery
    holds the lease, ``error``: an infrastructure failure left the match for the sweep).
    """
    return deliver(int(match_pk))


def deliver(match_pk: int, *, settings: config.Settings | None = None) -> str:
    """Deliver match ``match_pk``: lease, delivery row, ``scheduled`` in the sandbox, outcome.

    The lease is taken before the delivery row is written and released after it is finished.
    An infrastructure failure (database, sandbox start) finishes the delivery ``unknown`` and
    leaves the match ``pending`` for the sweep; a handler failure finishes it ``failed``.
    """
    settings = settings or config.load_settings()
    lease = DeliveryLease.acquire(
        redis_client(settings.redis_url),
        key=lease_key(settings.namespace, match_pk),
        ttl_ms=settings.lease_ttl_ms,
    )
    if lease is None:
        return "busy"
    try:
        with models_db.session_scope(settings.database_url) as session:
            job = cron_runs.start_delivery_txn(
                session, match_pk=match_pk, worker_id=worker_id(), now=utcnow()
            )
        if job is None:
            return "done"
        log.info(
            "delivering cron match",
            extra={
                "match": match_pk,
                "delivery": job.delivery_pk,
                "event": job.event,
                "version": job.version_uid,
            },
        )
        try:
            if job.problem is not None:
                outcome, error = "failed", job.problem
            else:
                outcome, error = run_scheduled(job, settings=settings)
        except Exception:
            log.exception("cron delivery infrastructure failure", extra={"match": match_pk})
            with models_db.session_scope(settings.database_url) as session:
                cron_runs.mark_vanished_txn(
                    session, delivery_pks=[job.delivery_pk], now=utcnow(), error=cron_runs.HOST_ERROR
                )
            return "error"
        with models_db.session_scope(settings.database_url) as session:
            cron_runs.finish_delivery_txn(
                session, delivery_pk=job.delivery_pk, outcome=outcome, error=error, now=utcnow()
            )
        return outcome
    finally:
        lease.release()


def run_scheduled(job: cron_runs.DeliveryJob, *, settings: config.Settings) -> tuple[str, str | None]:
    """Run the picked Version's ``scheduled(event, env, ctx)`` in a sandbox child (CONTRACT §4.6).

    The child imports the Version fresh, gets ``env`` (vars and workflow bindings; binding calls
    are answered here through ``workers.services.instance_bindings.call_binding``) and finishes with
    ``scheduled_done``. Returns ``("ok", None)`` or ``("failed", error text)`` — a raised error, a
    failed awaitable or ``wait_until``, a missing handler, or a child that died without a result.
    Raises ``sandbox.ZygoteUnavailable`` (or ``ChildGone``/``TimeoutError`` at start) when no child
    could be started: a host failure, not the handler's.
    """
    version = job.version or {}
    bindings = {b["name"]: b["resource"]["resourceUid"] for b in version.get("workflowBindings") or []}
    ttl_s = settings.lease_ttl_ms / 1000
    message = {
        "kind": "scheduled",
        "mainModule": version.get("mainModule"),
        "modules": version.get("modules") or {},
        "vars": version.get("vars") or {},
        "bindings": sorted(bindings),
        "event": job.event,
        "watchdogSeconds": ttl_s,
    }
    with sandbox.get_zygote().spawn(message) as child:
        child.start_heartbeat(ttl_s / 3)
        while True:
            try:
                reply = protocol.check_child_message(child.recv())
            except sandbox.ChildGone:
                return "failed", "the handler process exited without a result (os._exit, a signal or a crash)"
            except protocol.ProtocolError as exc:
                return "failed", f"the handler process broke the protocol: {exc}"
            if reply["op"] == "scheduled_done":
                if reply.get("ok") is True:
                    return "ok", None
                return "failed", protocol.safe_text(reply.get("message") or "the handler failed")
            if reply["op"] != "binding":
                return "failed", f"the handler process sent an unexpected {reply['op']!r} message"
            child.send(_answer_binding(reply, space=job.space, bindings=bindings))


def _answer_binding(request: dict, *, space: str, bindings: dict[str, str]) -> dict:
    """Answer one ``binding`` request of the handler with ``binding_result`` or ``binding_error``."""
    workflow_uid = bindings.get(request["binding"])
    if workflow_uid is None:
        return {"op": "binding_error", "name": "backend_unavailable", "message": "no such binding"}
    try:
        value = instance_bindings.call_binding(
            space=space, workflow_uid=workflow_uid, call=request["call"], args=request["args"]
        )
    except DomainError as exc:
        name = exc.code if exc.code in errors.ERROR_CLASSES else "backend_unavailable"
        return {"op": "binding_error", "name": name, "message": exc.message}
    except Exception:
        log.exception("binding call from a scheduled handler failed")
        return {"op": "binding_error", "name": "backend_unavailable", "message": "the host could not answer"}
    return {"op": "binding_result", "value": value}


def sweep(*, now: dt.datetime) -> int:
    """Beat duty: dispatch again every recorded match that is owed a delivery; returns how many.

    A pending match whose unfinished delivery has no live lease (its worker vanished) gets that
    delivery finished ``unknown`` and is dispatched now; a pending match with no running
    delivery is dispatched again once ``REDISPATCH_AFTER`` has passed since its last dispatch.
    Matches with a live lease are left alone. Opens its own sessions; dispatches after commit.
    """
    settings = config.load_settings()
    client = redis_client(settings.redis_url)
    dispatched = 0
    after_pk = 0
    while True:
        with models_db.session_scope(settings.database_url) as session:
            pending = cron_runs.pending_matches_txn(session, limit=SWEEP_BATCH, after_pk=after_pk)
        if not pending:
            return dispatched
        after_pk = pending[-1].pk
        leased = client.mget([lease_key(settings.namespace, m.pk) for m in pending])
        vanished: list[int] = []
        again: list[int] = []
        for match, holder in zip(pending, leased, strict=True):
            if holder is not None:
                continue
            if match.unfinished_delivery_pks:
                vanished.extend(match.unfinished_delivery_pks)
                again.append(match.pk)
            elif match.dispatched_at is None or now - match.dispatched_at >= REDISPATCH_AFTER:
                again.append(match.pk)
        if again:
            with models_db.session_scope(settings.database_url) as session:
                cron_runs.mark_vanished_txn(session, delivery_pks=vanished, now=now)
                cron_runs.note_dispatched_txn(session, match_pks=again, now=now)
            started = time.perf_counter()
            sent = dispatch.deliver_cron_matches(again)
            log.info(
                "cron sweep dispatched %d matches again in %.0f ms",
                sent,
                (time.perf_counter() - started) * 1000,
                extra={"matches": again, "vanished": vanished},
            )
            dispatched += len(again)
        if len(pending) < SWEEP_BATCH:
            return dispatched
