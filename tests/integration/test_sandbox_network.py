"""The sandbox's network (docs/egress.md): with ``TAKOHOST_SANDBOX_NETWORK=none`` a context reaches
nothing; by default (``public``) its only way out is the host's egress proxy, and a refused
connection fails at once with the reason. Real zygote children, the real proxy process; the
"internet" is a server on a loopback alias made public by the test-only setting and names come
from a DNS server of the test's own (``tests/support/egress.py``)."""

from __future__ import annotations

import os
import textwrap

import pytest

from takohost.runtime import isolation
from tests.support import egress as net
from workers import sandbox
from workers.egress import client as egress_client

#: This file's "internet" server address (files run side by side in several processes).
PUBLIC = net.public_address()

PROBE = """
import errno, socket, urllib.request
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        p = event["params"]
        out = {}
        def attempt(name, fn):
            try:
                out[name] = "ok:" + str(fn())
            except OSError as e:
                out[name] = f"{errno.errorcode.get(e.errno, e.errno)}:{e.strerror or e}"
            except Exception as e:
                out[name] = f"{type(e).__name__}:{e}"
        def tcp(address, protocol=0, family=socket.AF_INET):
            with socket.socket(family, socket.SOCK_STREAM, protocol) as s:
                s.settimeout(5)
                s.connect(address)
                s.sendall(b"GET /probe HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
                return s.recv(12).decode()
        attempt("by_name", lambda: urllib.request.urlopen("http://public.test/hello", timeout=5).read().decode())
        attempt("by_address", lambda: tcp((p["public"], 80)))
        attempt("postgres", lambda: tcp(("127.0.0.1", p["postgres"])))
        attempt("loopback_80", lambda: tcp(("127.0.0.1", 80)))
        attempt("private", lambda: tcp(("10.0.0.5", 443)))
        attempt("mapped", lambda: tcp(("::ffff:127.0.0.1", 80), family=socket.AF_INET6))
        attempt("name_of_loopback", lambda: socket.getaddrinfo("loopback.test", 80))
        attempt("port_22", lambda: tcp((p["public"], 22)))
        attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
        attempt("mptcp", lambda: tcp((p["public"], 80), 262))
        attempt("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
        attempt("packet", lambda: socket.socket(17, socket.SOCK_RAW, 0))
        return out
"""


@pytest.fixture
def public_net(monkeypatch):
    dns = net.DnsServer({"public.test": [PUBLIC], "loopback.test": ["127.0.0.1"]})
    monkeypatch.setenv("TAKOHOST_EGRESS_RESOLVER", dns.address)
    monkeypatch.setenv("TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS", net.PUBLIC_CIDR)
    egress_client.reset()
    try:
        with net.http_server(PUBLIC) as seen:
            yield seen
    finally:
        egress_client.reset()
        dns.close()


def _run(policy: isolation.policy.Policy, *, space: str | None = "acme") -> dict:
    z = sandbox.Zygote(policy=policy)
    z.start()
    try:
        job = {
            "kind": "workflow",
            "mainModule": "main.py",
            "modules": {"main.py": textwrap.dedent(PROBE)},
            "className": "W",
            "event": {"instanceId": "i", "params": {"postgres": 5432, "public": PUBLIC}},
            "vars": {},
            "bindings": [],
        }
        with z.spawn(job, space=space) as handle:
            message = handle.recv(timeout=60)
            handle.kill_and_wait()
            records = handle.finish_egress()
    finally:
        z.stop()
    assert message["op"] == "run_returned", message
    return {**message["output"], "records": records}


def test_with_network_none_a_context_reaches_nothing(public_net):
    out = _run(isolation.policy.Policy(network="none"))
    for name in ("by_address", "postgres", "private", "loopback_80"):
        assert out[name].startswith(("ENETUNREACH", "ECONNREFUSED")), (name, out[name])
    assert not out["by_name"].startswith("ok"), out["by_name"]
    assert public_net == []


def test_public_egress_reaches_public_addresses_through_the_proxy(public_net):
    out = _run(isolation.policy.Policy())
    assert out["by_name"] == "ok:hello from the internet /hello"
    assert out["by_address"] == "ok:HTTP/1.0 200"
    assert public_net == ["public.test/hello", "x/probe"]
    ok = [r for r in out["records"] if r["op"] == "connection" and r["outcome"] == "ok"]
    assert {(r["address"], r["port"]) for r in ok} == {(PUBLIC, 80)}


def test_refusals_are_fast_and_say_why(public_net):
    out = _run(isolation.policy.Policy())
    assert out["postgres"] == "ECONNREFUSED:egress to 127.0.0.1:5432 refused: loopback address"
    assert out["loopback_80"] == "ECONNREFUSED:egress to 127.0.0.1:80 refused: loopback address"
    assert out["private"] == "ECONNREFUSED:egress to 10.0.0.5:443 refused: private address"
    assert out["mapped"] == "ECONNREFUSED:egress to 127.0.0.1:80 refused: loopback address"
    assert out["port_22"] == f"ECONNREFUSED:egress to {PUBLIC}:22 refused: port 22 is not allowed"
    assert "No address associated with hostname" in out["name_of_loopback"]  # the why is in the logs
    lookups = [r for r in out["records"] if r["op"] == "lookup"]
    assert [r["reason"] for r in lookups] == ["resolves to 127.0.0.1 (loopback address)"]


def test_no_other_socket_kind_gets_around_the_proxy(public_net):
    out = _run(isolation.policy.Policy())
    for name in ("raw", "mptcp", "sctp", "packet"):
        assert out[name].startswith("EPERM"), (name, out[name])


def test_a_child_without_a_space_gets_no_way_out(public_net):
    out = _run(isolation.policy.Policy(), space=None)
    assert not out["by_address"].startswith("ok")
    assert out["records"] == [] and public_net == []


def test_a_worker_with_bad_egress_settings_refuses_to_start(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "TAKOHOST_EGRESS_ALLOW": "localhost:3000", "TAKOHOST_METRICS_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "host_cli", "worker"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "TAKOHOST_EGRESS_ALLOW" in proc.stderr and "not an IP address" in proc.stderr
