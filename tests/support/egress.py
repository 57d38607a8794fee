"""Test stand-ins for the internet, for the egress tests: a DNS server answering names from a
table (dnspython), and HTTP(S) servers on loopback addresses of the test's own that the test-only
``TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS`` makes "public". Nothing here reaches beyond this machine."""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator

import dns.message
import dns.rdatatype
import dns.rrset

#: Loopback addresses tests serve "the internet" on (127.0.0.0/8 is local on Linux: no set-up);
#: the suite sets ``TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS`` to this (``tests/conftest.py``). 127.0.0.1
#: stays refused whatever the setting says.
PUBLIC_CIDR = "127.0.0.0/24"
#: The default address of a test's "internet" server; test files that run at the same time as
#: others take one of their own with :func:`public_address`.
PUBLIC_ADDRESS = "127.0.0.5"


def public_address(ports: tuple[int, ...] = (80, 443)) -> str:
    """A loopback address in :data:`PUBLIC_CIDR` whose ``ports`` are free right now (test files
    run in several processes at once: each serves on an address of its own)."""
    import random

    for _ in range(200):
        address = f"127.0.0.{random.randrange(16, 250)}"
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind((address, port))
        except OSError:
            continue
        return address
    raise RuntimeError("no free public test address")


class DnsServer:
    """A UDP DNS server on 127.0.0.1: ``answers`` maps a name (no final dot) to a list of
    addresses, or to a callable of the query type (``"A"``, ``"AAAA"``) returning one (called per
    query: a name that changes its answer). Every query is recorded in ``queries``."""

    def __init__(self, answers: dict[str, list[str] | Callable[[str], list[str]]]) -> None:
        self.answers = answers
        self.queries: list[tuple[str, str]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            try:
                query = dns.message.from_wire(data)
            except Exception:  # noqa: BLE001
                continue
            response = dns.message.make_response(query)
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True).lower()
            kind = dns.rdatatype.to_text(question.rdtype)
            self.queries.append((name, kind))
            found = self.answers.get(name)
            if found is None:
                response.set_rcode(3)  # NXDOMAIN
            else:
                addresses = found(kind) if callable(found) else found
                family = 6 if kind == "AAAA" else 4
                rdata = [a for a in addresses if (":" in a) == (family == 6)]
                if rdata and kind in ("A", "AAAA"):
                    response.answer.append(dns.rrset.from_text_list(question.name, 5, "IN", kind, rdata))
            self.sock.sendto(response.to_wire(), peer)

    def close(self) -> None:
        self.sock.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(f"{self.headers.get('Host')}{self.path}")
        status, headers, body = self.routes.get(self.path, (200, {}, b"hello from the internet " + self.path.encode()))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append(f"POST {self.headers.get('Host')}{self.path} {body.decode(errors='replace')}")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(
    address: str = PUBLIC_ADDRESS,
    port: int = 80,
    *,
    routes: dict[str, tuple[int, dict[str, str], bytes]] | None = None,
    tls: tuple[str, str] | None = None,
) -> Iterator[list[str]]:
    """Serve HTTP (or HTTPS with ``tls`` = (certificate file, key file)) on ``address:port``;
    yields the list of requests seen (``host/path``)."""
    handler = type("Handler", (_Handler,), {"routes": dict(routes or {}), "seen": []})
    server = http.server.ThreadingHTTPServer((address, port), handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler.seen
    finally:
        server.shutdown()
        server.server_close()


def self_signed(directory: str, name: str) -> tuple[str, str]:
    """A certificate for ``name`` (and its own CA: it signs itself), made with openssl; returns
    (certificate file, key file)."""
    cert, key = f"{directory}/{name}.pem", f"{directory}/{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
            "-keyout", key, "-out", cert,
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextlib.contextmanager
def link_local_address(address: str = "169.254.77.7") -> Iterator[str]:
    """A link-local address of the test's own on ``lo`` (root only), removed afterwards: never
    the machine's metadata address."""
    assert address != "169.254.169.254"
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True, capture_output=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True)
