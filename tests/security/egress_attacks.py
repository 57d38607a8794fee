"""Tenant code of the egress attacks (``tests/security/test_egress.py``).

Not imported by the tests: deployed as a WorkerVersion's ``main.py`` and run inside the real
host's sandbox. Every attack tries to reach what the test set up on the host (servers on
loopback, a link-local address of the test's own, the host's API, Postgres and Redis ports) by
every route an attacker knows, and returns what happened. Standard library only. Coordination
with the test (a listener's port, "hold on while the host probes") goes through files in the
test-only shared directory (``params["shared"]``).
"""

import errno
import json
import os
import socket
import ssl
import threading
import time
import urllib.request


def _err(exc):
    if isinstance(exc, OSError) and exc.errno:
        return f"{type(exc).__name__}:{errno.errorcode.get(exc.errno, exc.errno)}:{exc.strerror or ''}"
    return f"{type(exc).__name__}:{exc}"[:300]


def _try(fn):
    try:
        return "OK:" + str(fn())[:200]
    except Exception as exc:  # noqa: BLE001 - the attacker's report
        return _err(exc)


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _tcp(host, port, payload=b"GET /attack HTTP/1.0\r\nHost: x\r\n\r\n"):
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect((host, port))
        s.sendall(payload)
        return s.recv(64)


def _raw_connect(host, port):
    """Around the runtime's wrapper: the C-level ``connect`` (what code could do with ctypes)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.settimeout(5)
        socket.socket.__mro__[1].connect(s, (host, port))  # _socket.socket.connect
        s.sendall(b"GET /bypass HTTP/1.0\r\nHost: x\r\n\r\n")
        return s.recv(64)


def _fastopen(host, port):
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.sendto(b"GET /fastopen HTTP/1.0\r\nHost: x\r\n\r\n", socket.MSG_FASTOPEN, (host, port))
        return s.recv(64)


def attack_connect(p):
    out = {}
    for host, port in p["targets"]:
        out[f"connect {host}:{port}"] = _try(lambda h=host, q=port: _tcp(h, q))
        out[f"raw {host}:{port}"] = _try(lambda h=host, q=port: _raw_connect(h, q))
        out[f"fastopen {host}:{port}"] = _try(lambda h=host, q=port: _fastopen(h, q))
        started = time.monotonic()
        _try(lambda h=host, q=port: _raw_connect(h, q))
        out[f"seconds {host}:{port}"] = time.monotonic() - started
    for host, port in p.get("udp", []):
        with socket.socket(_family(host), socket.SOCK_DGRAM) as u:
            out[f"udp {host}:{port}"] = _try(lambda h=host, q=port, s=u: s.sendto(b"LEAK", (h, q)))
    out["raw_socket"] = _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))
    out["packet_socket"] = _try(lambda: socket.socket(17, socket.SOCK_RAW, 0))
    return out


def attack_http(p):
    out = {}
    for label, url in p["urls"].items():
        out[label] = _try(lambda u=url: urllib.request.urlopen(u, timeout=8).read().decode())
    if p.get("ca"):
        context = ssl.create_default_context(cadata=p["ca"])
        out["https"] = _try(
            lambda: urllib.request.urlopen(p["https"], timeout=8, context=context).read().decode()
        )
    for name in p.get("names", []):
        out[f"resolve {name}"] = _try(
            lambda n=name: sorted({i[4][0] for i in socket.getaddrinfo(n, 80, socket.AF_INET)})
        )
    return out


def _wait_for(path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def attack_listen(p):
    """Listen without bind (autobind) and on an abstract Unix name, tell the test, and serve
    ``TENANT`` to whoever connects until the test says it is done."""
    listener = socket.socket()
    listener.listen(8)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + p["abstract"])
    abstract.listen(8)
    seen = []

    def serve(sock):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            seen.append("connection")
            conn.sendall(b"TENANT")
            conn.close()

    for sock in (listener, abstract):
        threading.Thread(target=serve, args=(sock,), daemon=True).start()
    with open(os.path.join(p["shared"], p["tag"] + ".port"), "w") as f:
        f.write(str(listener.getsockname()[1]))
    _wait_for(os.path.join(p["shared"], p["tag"] + ".done"))
    return {"port": listener.getsockname()[1], "seen": seen}


def attack_probe_port(p):
    """Another context (another Space) tries the first one's listener and abstract name."""
    return {
        "tcp": _try(lambda: _tcp("127.0.0.1", p["port"], b"")),
        "abstract": _try(lambda: _unix("\0" + p["abstract"])),
    }


def _unix(name):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(name)
        return s.recv(16)


ATTACKS = {
    "connect": attack_connect,
    "http": attack_http,
    "listen": attack_listen,
    "probe_port": attack_probe_port,
}


class Egress:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        p = event["params"]
        return step.do("attack", lambda: {"found": json.loads(json.dumps(ATTACKS[p["attack"]](p)))})

