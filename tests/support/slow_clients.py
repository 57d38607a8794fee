"""Hostile HTTP clients for the API's slow-client tests and benchmark (docs/spec/host-features.md#hf-neighbours).

:class:`SlowClients` keeps ``heads`` slowloris connections (a request head that never ends, one
more header byte every ``interval`` seconds) and ``bodies`` slow-body connections (a complete
``POST`` head announcing ``Content-Length: 1000000``, then one body byte every ``interval``
seconds) open against one address, half of each anonymous and half carrying a bearer token. A
connection the server closes is opened again at the next tick, so the attack stays at full
strength for as long as it runs. :func:`victim` measures ordinary GETs meanwhile.
"""

from __future__ import annotations

import dataclasses
import resource
import socket
import statistics
import threading
import time

import requests

#: What a slow-body connection announces (under the API's 16 MiB limit: it must be read).
BODY_BYTES = 1_000_000


def raise_fd_limit(want: int) -> None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to at least ``want`` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


@dataclasses.dataclass
class _Conn:
    kind: str  # "head" or "body"
    sock: socket.socket
    answer: bytes = b""


class SlowClients:
    """The attack, run in a thread of its own between :meth:`start` and :meth:`stop`.

    ``answers`` collects what the server sent on each connection it closed (``kind``, bytes);
    ``opened`` counts connections opened (the initial ones and the reopened ones).
    """

    def __init__(self, addr: tuple[str, int], *, space: str, token: str, heads: int = 400,
                 bodies: int = 400, interval: float = 2.0) -> None:
        self.addr, self.space, self.token = addr, space, token
        self.heads, self.bodies, self.interval = heads, bodies, interval
        self.answers: list[tuple[str, bytes]] = []
        self.opened = 0
        self.connect_errors = 0
        self._conns: list[_Conn] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def _head(self, kind: str, index: int) -> bytes:
        auth = f"Authorization: Bearer {self.token}\r\n" if index % 2 else ""
        if kind == "head":
            return f"GET /v2/spaces/{self.space}/resources HTTP/1.1\r\nHost: t\r\n{auth}X-Slow: ".encode()
        return (f"POST /v2/spaces/{self.space}/resources HTTP/1.1\r\nHost: t\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {BODY_BYTES}\r\n\r\n").encode()

    def _open(self, kind: str, index: int) -> _Conn | None:
        try:
            sock = socket.create_connection(self.addr, timeout=5)
            sock.sendall(self._head(kind, index))
        except OSError:
            self.connect_errors += 1
            return None
        sock.setblocking(False)
        self.opened += 1
        return _Conn(kind, sock)

    def start(self) -> SlowClients:
        """Open every connection (returns once they are all open), then trickle in a thread."""
        raise_fd_limit(self.heads + self.bodies + 512)
        for index in range(self.heads + self.bodies):
            kind = "head" if index < self.heads else "body"
            conn = self._open(kind, index)
            self._conns.append(conn if conn is not None else _Conn(kind, socket.socket()))
        self._thread.start()
        return self

    def _closed(self, conn: _Conn) -> bool:
        """Read what the server sent on ``conn``; whether the server closed it."""
        try:
            while chunk := conn.sock.recv(65536):
                conn.answer += chunk
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True

    def _run(self) -> None:
        byte = {"head": b"x", "body": b" "}  # whitespace: the body stays valid-looking JSON padding
        while not self._stop.wait(self.interval):
            for index, conn in enumerate(self._conns):
                if self._stop.is_set():
                    return
                closed = self._closed(conn)
                if not closed:
                    try:
                        conn.sock.send(byte[conn.kind])
                    except BlockingIOError:
                        pass
                    except OSError:
                        closed = True
                if closed:
                    if conn.answer:
                        self.answers.append((conn.kind, conn.answer))
                    conn.sock.close()
                    fresh = self._open(conn.kind, index)
                    self._conns[index] = fresh if fresh is not None else _Conn(conn.kind, socket.socket())

    def stop(self) -> None:
        """Stop trickling and close every connection."""
        self._stop.set()
        self._thread.join(timeout=30)
        for conn in self._conns:
            conn.sock.close()


@dataclasses.dataclass
class VictimResult:
    """Latencies (ms) of the victim's requests and how many failed (an error or not a 200)."""

    latencies_ms: list[float]
    failures: list[str]

    def summary(self) -> dict:
        """``{"requests", "failures", "p50_ms", "p90_ms", "p99_ms", "max_ms"}``."""
        lat = sorted(self.latencies_ms)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

        return {"requests": len(lat) + len(self.failures), "failures": len(self.failures),
                "p50_ms": round(statistics.median(lat), 1) if lat else None,
                "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": round(lat[-1], 1) if lat else None}


def victim(url: str, *, token: str, seconds: float, pause: float = 0.05, timeout: float = 5.0) -> VictimResult:
    """GET ``url`` with the bearer ``token`` for ``seconds``, one request every ``pause`` seconds,
    each on a new connection (as a fresh client would come), and time each one."""
    result = VictimResult([], [])
    headers = {"Authorization": f"Bearer {token}"}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            response = requests.get(url, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            result.failures.append(type(exc).__name__)
        else:
            if response.status_code == 200:
                result.latencies_ms.append((time.perf_counter() - started) * 1000)
            else:
                result.failures.append(f"{response.status_code} {response.text[:120]}")
        time.sleep(pause)
    return result
