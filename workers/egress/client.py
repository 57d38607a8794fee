"""The worker's side of the egress proxy (:mod:`workers.egress.proxy`): start it, hand it each
context's listeners, collect its records.

Like the zygote (``workers.sandbox.Zygote``), one proxy process per starting process,
reached through a Unix socket in a private directory; a process forked after the start (Celery's
prefork pool) opens its own connection on first use. :class:`EgressProxy` is thread-safe: each
context registers its descriptors with :meth:`EgressProxy.open` and gets a :class:`Session`,
whose :meth:`Session.records` returns what the proxy reported for it so far, and whose
:meth:`Session.close` closes its listeners (waiting for the last records only when the context
made a connection).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import socket
import sys
import threading
from typing import Any

from core import units
from takohost.runtime import protocol
from workers import owned_process
from workers.egress import config as egress_config

__all__ = ["EgressProxy", "EgressUnavailable", "Session", "get_egress_proxy"]

log = logging.getLogger(__name__)

#: How long :meth:`Session.close` waits for a context's last records (seconds).
CLOSE_WAIT_SECONDS = 1.0
_keys = itertools.count(1)


class EgressUnavailable(RuntimeError):
    """The proxy process is not running or refused to start (its reason in the message)."""


class Session:
    """One context's registration: ``key`` (unique in the worker process), its records queue."""

    def __init__(self, proxy: EgressProxy, key: str) -> None:
        self.proxy = proxy
        self.key = key
        self.queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.connections = 0  # records of connections received
        self.open_connections = 0  # relays the proxy started and has not reported yet
        self.closed = threading.Event()

    def records(self) -> list[dict[str, Any]]:
        """Every record received since the last call (``connection`` and ``lookup``)."""
        found = []
        while True:
            try:
                found.append(self.queue.get_nowait())
            except queue.Empty:
                return found

    def close(self, *, wait: bool) -> list[dict[str, Any]]:
        """Close the context's listeners and relays in the proxy; with ``wait``, wait up to
        :data:`CLOSE_WAIT_SECONDS` for its last records. Returns the records not yet taken."""
        self.proxy._send({"op": "close", "context": self.key})
        if wait:
            self.closed.wait(CLOSE_WAIT_SECONDS)
        self.proxy._forget(self.key)
        return self.records()


class EgressProxy(owned_process.OwnedProcess):
    """Client (and, in the starting process, owner) of one egress proxy process."""

    _name = "the egress proxy"
    _unavailable = EgressUnavailable

    def __init__(self, *, python: str | None = None, environ: dict[str, str] | None = None) -> None:
        self._python = python or sys.executable
        self._environ = dict(os.environ if environ is None else environ)
        self._init_owned()

    def _reset_client(self) -> None:
        super()._reset_client()
        self._sessions: dict[str, Session] = {}

    def start(self, timeout: float = 10.0) -> None:
        """Start the proxy and wait until it listens. Raises :class:`EgressUnavailable` (with
        the configuration error, e.g. a bad ``TAKOHOST_EGRESS_RULES_FILE``)."""
        self._make_dir(prefix="takohost-egress-", socket_name="egress.sock")
        socket_path = self.socket_path
        assert socket_path is not None

        def command(control_fd: int, ready_fd: int) -> list[str]:
            return [
                self._python,
                "-I",
                "-B",
                "-m",
                "workers.egress.proxy",
                "--socket",
                socket_path,
                "--control-fd",
                str(control_fd),
                "--ready-fd",
                str(ready_fd),
            ]

        answer = self._launch(command, timeout=timeout, env=self._environ)
        self._check_ready(answer, timeout=timeout, silent="the egress proxy did not start (see its stderr)")

    def open(self, *, space: str, fds: list[int]) -> Session:
        """Hand the proxy one context's listeners (``fds``, from the child's ``hello``; the caller
        closes its copies afterwards) for code of ``space``. Raises :class:`EgressUnavailable`."""
        key = f"{os.getpid()}-{next(_keys)}"
        session = Session(self, key)
        with self._lock:
            sock = self._connection()
            self._sessions[key] = session
            try:
                socket.send_fds(
                    sock,
                    [protocol.encode_frame({"op": "open", "context": key, "space": space, "descriptors": len(fds)})],
                    fds,
                )
            except OSError as exc:
                self._sessions.pop(key, None)
                self._close_connection()
                raise EgressUnavailable(f"cannot reach the egress proxy: {exc}") from None
        return session

    def _send(self, message: dict[str, Any]) -> None:
        with self._lock:
            if self._client is None or self._client_pid != os.getpid():
                return
            try:
                self._client.sendall(protocol.encode_frame(message))
            except OSError:
                self._close_connection()

    def _forget(self, key: str) -> None:
        with self._lock:
            self._sessions.pop(key, None)

    def _connected(self, sock: socket.socket) -> None:
        reader = threading.Thread(target=self._read, args=(sock,), name="egress-records", daemon=True)
        reader.start()

    def _read(self, sock: socket.socket) -> None:
        """The records reader: routes each record to its context's session."""
        buffer = protocol.FrameBuffer()
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            try:
                messages = buffer.feed(data)
            except protocol.ProtocolError:
                break
            for message in messages:
                with self._lock:
                    session = self._sessions.get(str(message.get("context")))
                if session is None:
                    continue
                op = message.get("op")
                if op == "closed":
                    session.closed.set()
                    continue
                if op == "opened":
                    session.open_connections += 1
                    continue
                if op == "connection":
                    session.connections += 1
                    if message.get("outcome") != "refused":
                        session.open_connections = max(0, session.open_connections - 1)
                session.queue.put(message)
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.closed.set()


_DEFAULT = owned_process.ProcessDefault(EgressProxy)


def get_egress_proxy() -> EgressProxy:
    """The process-wide egress proxy, started on first use (and restarted if it died)."""
    return _DEFAULT.get()


def job_part(space: str) -> dict[str, Any]:
    """The ``egress`` part of a job for code of ``space``: the Space's rules, the ports the
    namespace listens on and the test-only public CIDRs — what the runtime needs for clear
    refusals (``takohost.runtime.egress_hook``); never the host's own addresses or services."""
    config = egress_config.current()
    return {
        "rules": config.space_rules(space).to_json(),
        "listenPorts": list(config.listen_ports),
        "testPublic": [str(net) for net in config.test_public],
    }


def describe(record: dict[str, Any]) -> str:
    """The ``host`` log line of one record, e.g. ``egress api.example.com 93.184.216.34:443:
    sent 517 B, received 4.1 KiB, 0.21 s`` or ``egress 10.0.0.5:5432 refused: private address``."""
    if record.get("op") == "lookup":
        return f"egress name {record.get('name')} {record.get('outcome')}: {record.get('reason')}"
    address = str(record.get("address"))
    where = f"[{address}]:{record.get('port')}" if ":" in address else f"{address}:{record.get('port')}"
    name = record.get("name")
    head = f"egress {name} {where}" if name else f"egress {where}"
    outcome = record.get("outcome")
    if outcome == "refused":
        return f"{head} refused: {record.get('reason')}"
    if outcome == "failed":
        return f"{head} failed: {record.get('reason')} ({float(record.get('seconds') or 0):.2f} s)"
    return (
        f"{head}: sent {_size(record.get('sent'))}, received {_size(record.get('received'))}, "
        f"{float(record.get('seconds') or 0):.2f} s"
    )


def _size(value: object) -> str:
    return units.size_text(value if type(value) is int else 0)




def reset() -> None:
    """Stop this process's default proxy and forget the configuration (tests that change the
    environment of their own process)."""
    _DEFAULT.reset()
    egress_config.reset()
