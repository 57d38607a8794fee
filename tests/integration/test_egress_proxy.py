"""The egress proxy with a real network namespace: a process in a namespace of its own set up by
``takohost.runtime.netns`` whose listeners the real proxy process serves (``workers.egress``).

These test the way out itself, below the sandbox (which adds seccomp, its own uid and the rest:
``tests/security/test_egress.py`` attacks it through real workers). The "internet" is a server on
a loopback alias the test-only ``TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS`` makes public, and a DNS
server of the test's own.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from takohost.runtime.isolation import network as netns
from tests.support import egress as net
from workers.egress import client

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
#: This file's "internet" server address (files run side by side in several processes).
PUBLIC = net.public_address()


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


@pytest.fixture
def dns_server() -> Iterator[net.DnsServer]:
    flip = iter([PUBLIC, "127.0.0.1"] * 10)
    server = net.DnsServer(
        {
            "public.test": [PUBLIC],
            "loopback.test": ["127.0.0.1"],
            "private.test": ["10.0.0.5", PUBLIC],
            "rebind.test": lambda kind: [next(flip)] if kind == "A" else [],
            "metadata.test": ["169.254.169.254"],
        }
    )
    yield server
    server.close()


@pytest.fixture
def host_port() -> int:
    """A port of a "host service" on 127.0.0.1 that is also an egress port (so that a connection
    to it reaches the proxy, which must refuse it)."""
    return free_port()


@pytest.fixture
def proxy(dns_server: net.DnsServer, host_port: int) -> Iterator[client.EgressProxy]:
    environ = {
        **os.environ,
        "TAKOHOST_EGRESS_RESOLVER": dns_server.address,
        "TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS": net.PUBLIC_CIDR,
        "TAKOHOST_EGRESS_PORTS": f"80,443,{host_port}",
    }
    proxy = client.EgressProxy(environ=environ)
    proxy.start()
    yield proxy
    proxy.stop()


def in_namespace(
    proxy: client.EgressProxy, ports: tuple[int, ...], work: Callable[[], dict], *, space: str = "acme"
) -> tuple[dict, list[dict]]:
    """Run ``work`` in a forked process in a new network namespace served by ``proxy``; returns
    what it returned (JSON) and the proxy's records."""
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child
        code = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            flags = CLONE_NEWNET | (0 if os.geteuid() == 0 else CLONE_NEWUSER)
            if libc.unshare(flags) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            ipv6 = netns.configure()
            sockets = netns.listeners(ports, ipv6=ipv6)
            socket.send_fds(child, [b"L"], [s.fileno() for s in sockets])
            for s in sockets:
                s.close()
            child.recv(1)
            try:
                result = work()
            except BaseException:  # noqa: BLE001 - reported to the test
                import traceback

                result = {"error": traceback.format_exc()}
            child.sendall(json.dumps(result).encode())
            code = 0
        finally:
            os._exit(code)
    child.close()
    _, fds, _, _ = socket.recv_fds(parent, 16, 16)
    session = proxy.open(space=space, fds=fds)
    for fd in fds:
        os.close(fd)
    parent.sendall(b"g")
    chunks = []
    while data := parent.recv(65536):
        chunks.append(data)
    os.waitpid(pid, 0)
    time.sleep(0.2)
    records = session.close(wait=True)
    result = json.loads(b"".join(chunks))
    assert "error" not in result, result["error"]
    return result, records


def attempt(fn: Callable[[], object]) -> str:
    try:
        return f"ok {fn()!r}"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def test_public_http_goes_through_and_is_recorded(proxy: client.EgressProxy) -> None:
    import urllib.request

    with net.http_server(PUBLIC) as seen:
        result, records = in_namespace(
            proxy,
            (80, 443),
            lambda: {"body": urllib.request.urlopen("http://public.test/hello", timeout=5).read().decode()},
        )
    assert result == {"body": "hello from the internet /hello"}
    assert seen == ["public.test/hello"]
    [record] = [r for r in records if r["op"] == "connection"]
    assert record["outcome"] == "ok" and record["name"] == "public.test"
    assert record["address"] == PUBLIC and record["port"] == 80
    assert record["sent"] > 30 and record["received"] > 30
    assert client.describe(record).startswith(f"egress public.test {PUBLIC}:80: sent ")


def test_https_with_a_real_tls_handshake(proxy: client.EgressProxy, tmp_path) -> None:
    import ssl
    import urllib.request

    cert, key = net.self_signed(str(tmp_path), "public.test")

    def fetch() -> dict:
        context = ssl.create_default_context(cafile=cert)
        body = urllib.request.urlopen("https://public.test/secure", timeout=5, context=context).read()
        with socket.create_connection(("public.test", 443), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="public.test") as tls:
                version = tls.version()
        return {"body": body.decode(), "version": version}

    with net.http_server(PUBLIC, port=443, tls=(cert, key)) as seen:
        result, records = in_namespace(proxy, (80, 443), fetch)
    assert result["body"] == "hello from the internet /secure"
    assert result["version"].startswith("TLS")
    assert seen == ["public.test/secure"]
    assert all(r["outcome"] == "ok" for r in records if r["op"] == "connection")
    assert [r["port"] for r in records if r["op"] == "connection"] == [443, 443]


def test_refused_endpoints_are_reset_and_recorded(proxy: client.EgressProxy, host_port: int) -> None:
    with net.http_server("127.0.0.1", host_port) as seen:

        def work() -> dict:
            out = {}
            for label, address in [
                ("loopback", ("127.0.0.1", host_port)),
                ("mapped", ("::ffff:127.0.0.1", host_port)),
                ("v6-loopback", ("::1", host_port)),
                ("private", ("10.0.0.5", 80)),
                ("cgnat", ("100.64.0.1", 443)),
                ("unspecified", ("0.0.0.0", host_port)),
            ]:
                family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET

                def go(family=family, address=address) -> bytes:
                    with socket.socket(family) as s:
                        s.settimeout(5)
                        s.connect(address)
                        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                        return s.recv(100)

                started = time.monotonic()
                out[label] = [attempt(go), time.monotonic() - started]
            return out

        result, records = in_namespace(proxy, (80, 443, host_port), work)
    assert seen == [], "a refused endpoint reached the host's server"
    for label, (outcome, seconds) in result.items():
        assert outcome.startswith(("ConnectionResetError", "ok b''", "BrokenPipeError")), (label, outcome)
        assert seconds < 3, f"{label}: a refusal must be fast, took {seconds:.1f} s"
    reasons = {(r["address"], r["port"]): r["reason"] for r in records if r["outcome"] == "refused"}
    assert reasons[("127.0.0.1", host_port)] == "loopback address"
    assert reasons[("::1", host_port)] == "loopback address"
    assert reasons[("10.0.0.5", 80)] == "private address"
    assert reasons[("100.64.0.1", 443)] == "private address"


def test_a_redirect_to_a_private_address_gets_nothing(proxy: client.EgressProxy, host_port: int) -> None:
    import urllib.request

    routes = {"/go": (302, {"Location": f"http://127.0.0.1:{host_port}/secret"}, b"")}
    with net.http_server(PUBLIC, routes=routes) as public, net.http_server("127.0.0.1", host_port) as private:
        result, records = in_namespace(
            proxy, (80, 443, host_port), lambda: {"fetch": attempt(lambda: urllib.request.urlopen("http://public.test/go", timeout=5).read())}
        )
    assert public == ["public.test/go"]
    assert private == []
    assert not result["fetch"].startswith("ok")
    assert any(r.get("reason") == "loopback address" and r["port"] == host_port for r in records)


def test_dns_answers_only_what_the_space_may_reach(proxy: client.EgressProxy, dns_server: net.DnsServer) -> None:
    def work() -> dict:
        def look(name: str) -> list[str]:
            try:
                return sorted({info[4][0] for info in socket.getaddrinfo(name, 80, socket.AF_INET)})
            except socket.gaierror as exc:
                return [f"gaierror {exc.errno}"]

        return {
            name: look(name)
            for name in ["public.test", "loopback.test", "private.test", "metadata.test", "rebind.test", "rebind.test", "nothing.test", "localhost"]
        } | {"rebind-connect": [attempt(lambda: socket.create_connection(("rebind.test", 80), timeout=5).close())]}

    with net.http_server(PUBLIC):
        result, records = in_namespace(proxy, (80, 443), work)
    assert result["public.test"] == [PUBLIC]
    assert result["private.test"] == [PUBLIC]  # 10.0.0.5 is left out
    for name in ("loopback.test", "metadata.test", "nothing.test"):
        assert result[name][0].startswith("gaierror"), (name, result[name])
    assert result["localhost"] == ["127.0.0.1"]  # the context's own /etc/hosts: its own loopback
    refused = {r["name"]: r["reason"] for r in records if r["op"] == "lookup"}
    assert refused["loopback.test"] == "resolves to 127.0.0.1 (loopback address)"
    assert refused["metadata.test"] == "resolves to 169.254.169.254 (link-local address)"
    assert "10.0.0.5 (private address)" in refused["private.test"]
    assert ("rebind.test", "A") in dns_server.queries


def test_nothing_but_the_proxy_leaves_the_namespace(proxy: client.EgressProxy, host_port: int) -> None:
    """UDP, TCP Fast Open, a listener without bind() and abstract Unix names stay inside."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((PUBLIC, 0))
    udp.settimeout(0.5)
    udp_port = udp.getsockname()[1]
    name = f"\0takohost-test-{os.getpid()}-{time.monotonic_ns()}"

    def work() -> dict:
        out = {}
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.sendto(b"leak", (PUBLIC, udp_port))
            u.sendto(b"leak", ("127.0.0.1", udp_port))
        with socket.socket() as s:
            out["fastopen"] = attempt(
                lambda: s.sendto(b"GET / HTTP/1.0\r\n\r\n", socket.MSG_FASTOPEN, ("127.0.0.1", host_port))
            )
        listener = socket.socket()
        listener.listen(5)
        out["autobound"] = listener.getsockname()[1]
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind(name)
        out["abstract"] = "bound"
        time.sleep(1.0)
        return out

    with net.http_server("127.0.0.1", host_port) as seen:
        result, _ = in_namespace(proxy, (80, 443, host_port), work)
        with pytest.raises(TimeoutError):
            udp.recvfrom(100)
        with socket.socket() as s:
            s.settimeout(1)
            assert s.connect_ex(("127.0.0.1", result["autobound"])) != 0
    udp.close()
    assert seen == []
    assert result["abstract"] == "bound"
    with socket.socket(socket.AF_UNIX) as mine:
        mine.bind(name)  # the host's namespace never saw the tenant's name


def test_a_space_rule_allows_one_exact_private_endpoint(dns_server: net.DnsServer, tmp_path) -> None:
    port = free_port()
    rules = tmp_path / "egress.toml"
    rules.write_text(f'[spaces.acme]\nallow = ["127.0.0.1:{port}"]\n[spaces.other]\ndeny = ["*.test"]\n')
    environ = {
        **os.environ,
        "TAKOHOST_EGRESS_RESOLVER": dns_server.address,
        "TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS": net.PUBLIC_CIDR,
        "TAKOHOST_EGRESS_RULES_FILE": str(rules),
    }
    proxy = client.EgressProxy(environ=environ)
    proxy.start()
    try:
        import urllib.request

        def fetch() -> dict:
            return {
                "mock": attempt(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/m", timeout=5).read()),
                "public": attempt(lambda: urllib.request.urlopen("http://public.test/p", timeout=5).read()),
            }

        with net.http_server("127.0.0.1", port) as mock, net.http_server(PUBLIC) as public:
            acme, _ = in_namespace(proxy, (80, 443, port), fetch, space="acme")
            other, records = in_namespace(proxy, (80, 443, port), fetch, space="other")
        assert acme["mock"].startswith("ok") and acme["public"].startswith("ok")
        assert not other["mock"].startswith("ok")
        assert not other["public"].startswith("ok")
        assert mock == [f"127.0.0.1:{port}/m"] and public == ["public.test/p"]
        assert {r["reason"] for r in records if r["op"] == "lookup"} == {"denied by the rule '*.test'"}
    finally:
        proxy.stop()
