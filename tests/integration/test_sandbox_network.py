"""The sandbox's network settings (README "Security model"): by default a context reaches
nothing; ``TAKOHOST_SANDBOX_NETWORK=outbound`` lets it connect over TCP to the allowed ports only,
never to the host's Postgres or Redis, never bind a TCP port, never reach an abstract Unix socket
of the host. A local TCP server on a free port stands in for "the internet" (the machine has no
other network)."""

from __future__ import annotations

import socket
import textwrap
import threading
import uuid

import pytest

from takohost.runtime import isolation
from workers.engine import sandbox

PROBE = """
import errno, socket
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        p = event["params"]
        out = {}
        def attempt(name, family, address, protocol=0):
            try:
                s = socket.socket(family, socket.SOCK_STREAM, protocol)
            except OSError as e:
                out[name] = errno.errorcode.get(e.errno, str(e.errno))
                return
            s.settimeout(3)
            try:
                s.connect(address)
                out[name] = "connected:" + s.recv(16).decode()
            except OSError as e:
                out[name] = errno.errorcode.get(e.errno, str(e.errno))
            finally:
                s.close()
        attempt("internet", socket.AF_INET, ("127.0.0.1", p["allowed"]))
        attempt("postgres", socket.AF_INET, ("127.0.0.1", 5432))
        attempt("redis", socket.AF_INET, ("127.0.0.1", 6379))
        attempt("abstract", socket.AF_UNIX, "\\0" + p["abstract"])
        # MPTCP (262) falls back to TCP with a plain server, and Landlock's rules are TCP's only
        attempt("mptcp_redis", socket.AF_INET, ("127.0.0.1", 6379), 262)
        attempt("mptcp_internet", socket.AF_INET, ("127.0.0.1", p["allowed"]), 262)
        attempt("sctp", socket.AF_INET, ("127.0.0.1", p["allowed"]), 132)
        for name, protocol in (("listen", 0), ("mptcp_listen", 262)):
            try:
                server = socket.socket(socket.AF_INET, socket.SOCK_STREAM, protocol)
                server.bind(("127.0.0.1", 0))
                server.listen()
                out[name] = "listening"
            except OSError as e:
                out[name] = errno.errorcode.get(e.errno, str(e.errno))
        return out
"""


class _Server:
    """A TCP server on a free loopback port and an abstract Unix socket, both answering ``hi``."""

    def __init__(self) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.name = f"takohost-test-{uuid.uuid4().hex[:8]}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.name)
        self.unix.listen()
        self.threads = [threading.Thread(target=self._serve, args=(s,), daemon=True) for s in (self.tcp, self.unix)]
        for thread in self.threads:
            thread.start()

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(b"hi")
            conn.close()

    def close(self) -> None:
        self.tcp.close()
        self.unix.close()


@pytest.fixture()
def server():
    s = _Server()
    yield s
    s.close()


def _run(policy: isolation.policy.Policy, server: _Server) -> dict:
    z = sandbox.Zygote(policy=policy)
    z.start()
    try:
        job = {
            "kind": "workflow",
            "mainModule": "main.py",
            "modules": {"main.py": textwrap.dedent(PROBE)},
            "className": "W",
            "event": {"instanceId": "i", "params": {"allowed": server.port, "abstract": server.name}},
            "vars": {},
            "bindings": [],
        }
        with z.spawn(job) as handle:
            message = handle.recv(timeout=20)
    finally:
        z.stop()
    assert message["op"] == "run_returned", message
    return message["output"]


def test_by_default_a_context_reaches_nothing(server):
    out = _run(isolation.policy.Policy(), server)
    assert out["internet"] == out["postgres"] == out["redis"] == "ENETUNREACH"
    assert out["abstract"] == "ECONNREFUSED"  # its own network namespace: the name does not exist


def test_outbound_reaches_the_allowed_ports_only(server):
    policy = isolation.policy.Policy(network="outbound", outbound_ports=(server.port,))
    out = _run(policy, server)
    assert out["internet"] == "connected:hi"
    assert out["postgres"] in ("EACCES", "EPERM")
    assert out["redis"] in ("EACCES", "EPERM")
    assert out["abstract"] in ("EACCES", "EPERM")  # the host's abstract socket, outside its domain
    assert out["listen"] in ("EACCES", "EPERM")  # no server on the host's network
    # no way around the rules through another protocol (seccomp refuses the socket)
    assert out["mptcp_redis"] == out["mptcp_internet"] == out["mptcp_listen"] == "EPERM", out
    assert out["sctp"] == "EPERM", out


@pytest.mark.parametrize(
    ("variable", "value", "port"),
    [
        ("TAKOHOST_DATABASE_URL", "postgresql+psycopg://u:p@db:443/takohost", 443),
        ("TAKOHOST_REDIS_URL", "redis://:secret@cache:80/0", 80),
        ("TAKOHOST_BROKER_URL", "redis://broker:443/1", 443),
        ("TAKOHOST_METRICS_PORT", "443", 443),
    ],
)
def test_outbound_refuses_the_ports_of_the_hosts_services(variable, value, port):
    env = {"TAKOHOST_SANDBOX_NETWORK": "outbound", variable: value}
    with pytest.raises(ValueError, match=f"includes {port}, the port of {variable}"):
        isolation.policy.Policy.from_environ(env)
    env["TAKOHOST_SANDBOX_OUTBOUND_PORTS"] = "8443"
    assert isolation.policy.Policy.from_environ(env).outbound_ports == (8443,)


def test_outbound_defaults_and_bad_values():
    policy = isolation.policy.Policy.from_environ({"TAKOHOST_SANDBOX_NETWORK": "outbound"})
    assert (policy.network, policy.outbound_ports) == ("outbound", (80, 443))
    assert isolation.policy.Policy.from_json(policy.to_json()) == policy
    with pytest.raises(ValueError, match="TAKOHOST_SANDBOX_NETWORK must be one of none, outbound"):
        isolation.policy.Policy.from_environ({"TAKOHOST_SANDBOX_NETWORK": "host"})
    with pytest.raises(ValueError, match="TCP ports separated by commas"):
        isolation.policy.Policy.from_environ({"TAKOHOST_SANDBOX_OUTBOUND_PORTS": "80,https"})


def test_a_worker_whose_metrics_port_is_an_outbound_port_refuses_to_start(tmp_path):
    """``--metrics-port`` serves unauthenticated metrics on the host's network, which an
    ``outbound`` context shares: a worker whose own metrics port is allowed refuses to start."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "TAKOHOST_SANDBOX_NETWORK": "outbound",
        "TAKOHOST_SANDBOX_OUTBOUND_PORTS": "18443",
        "TAKOHOST_METRICS_DIR": str(tmp_path),
    }
    env.pop("TAKOHOST_METRICS_PORT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_cli", "worker", "--metrics-port", "18443"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the worker started with its metrics port open to tenant code") from None
    assert proc.returncode != 0
    assert "includes 18443, the port of TAKOHOST_METRICS_PORT" in err, err[-2000:]
