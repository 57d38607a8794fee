"""Public egress attacked as a hostile tenant would (docs/egress.md; the porous ``outbound`` mode's
findings: TCP Fast Open past the port rules, ``listen()`` autobinding on the host, abstract names
in the host's namespace, open UDP, the metadata address on port 80).

One private stack of real processes (API, a worker of two prefork slots, beat) serves the module.
Its workers see "the internet" as the test-only public CIDR ``127.0.0.0/24`` (not 127.0.0.1), where the test
serves HTTP and HTTPS, and resolve names through a DNS server of the test's own. The host's
"services" are servers the test runs on 127.0.0.1 and on a link-local address of its own (added
to ``lo`` for the module and removed after; never the machine's metadata address), plus the
stack's real API, Postgres and Redis ports. Tenant code (``tests/security/egress_attacks.py``)
tries each route from a step effect, and from import-time code while its Version is validated.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from models import db as models_db
from services import tokens
from tests.security._attack_support import output_of, run_attack, wait_terminal
from tests.support import egress as net
from tests.support import workflows

SOURCE = (__import__("pathlib").Path(__file__).parent / "egress_attacks.py").read_text()
UID_BASE = 1_700_000_000 + random.randrange(250, 500) * 1_000_000
#: This file's "internet" server address (files run side by side in several processes).
PUBLIC = net.public_address()


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class Recorder:
    """A TCP server that records every byte it is sent (a stand-in for a host service)."""

    def __init__(self, address: str, port: int) -> None:
        self.sock = socket.create_server((address, port))
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                self.received.append(conn.recv(4096))
            with contextlib.suppress(OSError):
                conn.sendall(b"HOST-SECRET")
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[dict]:
    """The test's internet and host services: ``{"dns", "service_port", "services", "udp",
    "linklocal", "ca", "cert", "key", "https_seen", "http_seen"}``."""
    flip = iter([PUBLIC, "127.0.0.1"] * 50)
    dns = net.DnsServer(
        {
            "public.test": [PUBLIC],
            "internal.test": ["127.0.0.1"],
            "metadata.test": ["169.254.77.7"],
            "rebind.test": lambda kind: [next(flip)] if kind == "A" else [],
        }
    )
    service_port = _free_port()
    directory = tmp_path_factory.mktemp("egress")
    cert, key = net.self_signed(str(directory), "public.test")
    with contextlib.ExitStack() as stack:
        linklocal = stack.enter_context(net.link_local_address("169.254.77.7"))
        services = [Recorder("127.0.0.1", service_port), Recorder(linklocal, 80), Recorder("127.0.0.1", 80)]
        routes = {"/redirect": (302, {"Location": f"http://127.0.0.1:{service_port}/secret"}, b"")}
        http_seen = stack.enter_context(net.http_server(PUBLIC, routes=routes))
        https_seen = stack.enter_context(net.http_server(PUBLIC, port=443, tls=(cert, key)))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("0.0.0.0", 0))
        udp.setblocking(False)
        try:
            yield {
                "dns": dns,
                "service_port": service_port,
                "services": services,
                "udp": udp,
                "linklocal": linklocal,
                "ca": open(cert).read(),
                "http_seen": http_seen,
                "https_seen": https_seen,
            }
        finally:
            udp.close()
            for service in services:
                service.close()
            dns.close()


@pytest.fixture(scope="module")
def stack(world):
    env = {
        "TAKOHOST_SANDBOX_UID_BASE": str(UID_BASE),
        "TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS": net.PUBLIC_CIDR,
        "TAKOHOST_EGRESS_RESOLVER": world["dns"].address,
        "TAKOHOST_EGRESS_PORTS": f"80,443,{world['service_port']}",
    }
    with workflows.private_stack(workers=1, worker_concurrency=2, lease_ttl_ms=3000, extra_env=env) as s:
        yield s


@pytest.fixture(scope="module")
def tenants(stack):
    other = f"s{uuid.uuid4().hex[:12]}"
    with models_db.session_scope(stack.db_url) as session:
        other_token = tokens.create_token_txn(session, space=other)
    out = {}
    for key, space, token in (("a", stack.space, stack.token), ("b", other, other_token)):
        deployed = workflows.deploy(stack.db_url, space=space, source=SOURCE, class_name="Egress")
        out[key] = workflows.HttpInstances(stack.api_url, token, space, deployed.workflow)
        out[key].space = space
    return out


def _found(final: dict) -> dict:
    return output_of(final)["found"]


def _services_untouched(world: dict) -> None:
    for service in world["services"]:
        assert service.received == [], f"a host service received {service.received!r}"
    with pytest.raises(BlockingIOError):
        print("the host's UDP listener received:", world["udp"].recvfrom(100))


def _stack_service_endpoints(stack) -> list[tuple[str, int]]:
    """The TCP endpoints of the stack's own Postgres, Redis and broker, as its processes are
    configured (``TAKOHOST_DATABASE_URL``, ``TAKOHOST_REDIS_URL``, ``TAKOHOST_BROKER_URL``); a
    name is taken at each address it resolves to here, and a Unix-socket URL has none."""
    import urllib.parse

    import sqlalchemy.engine

    database = sqlalchemy.engine.make_url(stack.db_url)
    found: list[tuple[str | None, int | None]] = [(database.host, database.port or 5432)]
    for variable in ("TAKOHOST_REDIS_URL", "TAKOHOST_BROKER_URL"):
        url = stack.env.get(variable) or os.environ.get(variable)
        if url and urllib.parse.urlsplit(url).scheme in ("redis", "rediss"):
            parts = urllib.parse.urlsplit(url)
            found.append((parts.hostname or "localhost", parts.port or 6379))
    endpoints: list[tuple[str, int]] = []
    for host, port in found:
        if not host or port is None or host.startswith("/"):
            continue  # a Unix socket: no TCP route to refuse
        for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            endpoint = (str(info[4][0]), port)
            if endpoint not in endpoints:
                endpoints.append(endpoint)
    return endpoints


def test_no_route_reaches_the_host_s_services(stack, tenants, world):
    api_port = int(stack.api_url.rsplit(":", 1)[1])
    services = _stack_service_endpoints(stack)
    assert services, "the stack's Postgres has a TCP endpoint"
    targets = [
        ("127.0.0.1", world["service_port"]),  # an egress port: the proxy gets it, and refuses
        ("127.0.0.1", 80),
        ("::1", world["service_port"]),
        ("::ffff:127.0.0.1", world["service_port"]),
        ("0.0.0.0", world["service_port"]),
        (world["linklocal"], 80),
        ("::ffff:" + world["linklocal"], 80),
        ("127.0.0.1", api_port),
        ("127.0.0.1", 5432),
        ("127.0.0.1", 6379),
        ("10.0.0.5", 443),
        ("100.64.0.1", 80),
        # the stack's real Postgres and Redis (and broker), wherever they listen
        *(endpoint for endpoint in services if endpoint not in (("127.0.0.1", 5432), ("127.0.0.1", 6379))),
    ]
    udp_port = world["udp"].getsockname()[1]
    udp = [("127.0.0.1", udp_port), (PUBLIC, udp_port), (world["linklocal"], udp_port)]
    found = _found(run_attack(tenants["a"], "connect", {"targets": targets, "udp": udp}))
    time.sleep(0.5)
    _services_untouched(world)
    for host, port in targets:
        for route in ("connect", "raw", "fastopen"):
            value = found[f"{route} {host}:{port}"]
            assert not value.startswith("OK:") or "HOST-SECRET" not in value, (route, host, port, value)
            assert "HOST-SECRET" not in value
            assert not value.startswith("OK:b'HTTP"), (route, host, port, value)
        assert found[f"seconds {host}:{port}"] < 3, f"{host}:{port}: a refusal must be fast"
        # through the runtime's socket (what ordinary clients use): a clear reason at once
        assert "egress to" in found[f"connect {host}:{port}"] and "refused:" in found[f"connect {host}:{port}"], (
            host,
            port,
            found[f"connect {host}:{port}"],
        )
    assert "refused: link-local address" in found[f"connect {world['linklocal']}:80"]
    assert "refused: loopback address" in found[f"connect 127.0.0.1:{api_port}"]
    assert "refused: private address" in found["connect 10.0.0.5:443"]
    for host, port in services:
        # not one byte of the real Postgres or Redis, by any route
        for route in ("connect", "raw", "fastopen"):
            value = found[f"{route} {host}:{port}"]
            assert not value.startswith("OK:") or value == "OK:b''", (route, host, port, value)
    assert found["raw_socket"].startswith("PermissionError") and found["packet_socket"].startswith("PermissionError")


def test_public_http_https_and_names_work_and_refusals_follow_redirects(stack, tenants, world):
    params = {
        "urls": {
            "by_name": "http://public.test/hello",
            "by_address": f"http://{PUBLIC}/plain",
            "redirect": "http://public.test/redirect",
            "internal": "http://internal.test/",
            "metadata": "http://metadata.test/latest/meta-data/",
            "rebind_1": "http://rebind.test/first",
            "rebind_2": "http://rebind.test/second",
        },
        "ca": world["ca"],
        "https": "https://public.test/secure",
        "names": ["public.test", "internal.test", "metadata.test"],
    }
    final = run_attack(tenants["a"], "http", params)
    found = _found(final)
    assert found["by_name"] == "OK:hello from the internet /hello"
    assert found["by_address"] == "OK:hello from the internet /plain"
    assert found["https"] == "OK:hello from the internet /secure"  # a real TLS handshake, verified
    assert found["rebind_1"] == "OK:hello from the internet /first"
    assert not found["rebind_2"].startswith("OK"), found["rebind_2"]  # the name now says 127.0.0.1
    for label in ("redirect", "internal", "metadata"):
        assert not found[label].startswith("OK"), (label, found[label])
    assert found["resolve public.test"] == f"OK:['{PUBLIC}']"
    assert not found["resolve internal.test"].startswith("OK")
    assert not found["resolve metadata.test"].startswith("OK")
    assert "public.test/redirect" in world["http_seen"] and "public.test/secure" in world["https_seen"]
    time.sleep(0.5)
    _services_untouched(world)
    # every connection and refusal is kept with the instance's logs, as host lines
    code, body = tenants["a"].call("GET", "/" + tenants["a"].enc(final["id"]) + "/logs?limit=1000")
    assert code == 200, body
    egress_lines = [line for line in body["logs"] if line["stream"] == "host" and line["message"].startswith("egress ")]
    texts = [line["message"] for line in egress_lines]
    assert any(t.startswith(f"egress public.test {PUBLIC}:80: sent ") for t in texts), texts
    assert any(t.startswith(f"egress public.test {PUBLIC}:443: sent ") for t in texts), texts
    assert any(t == "egress name internal.test refused: resolves to 127.0.0.1 (loopback address)" for t in texts)
    assert any(t == "egress name metadata.test refused: resolves to 169.254.77.7 (link-local address)" for t in texts)
    assert all(line["step"] == "attack" and line["attempt"] == 1 for line in egress_lines), egress_lines


#: A Version pinning the three HTTP clients (``CLIENTS_SOURCE``'s imports run at validation, from
#: the host's package layer): each used the way its documentation says, no proxy settings.
CLIENTS_SOURCE = textwrap.dedent(
    """
    import ssl
    import time

    import httpx
    import requests
    import urllib3


    def _get(library, url, ca):
        if library == "requests":
            response = requests.get(url, timeout=10, **({"verify": ca} if ca else {}))
            return response.status_code, response.text
        if library == "httpx":
            verify = {"verify": ssl.create_default_context(cafile=ca)} if ca else {}
            response = httpx.get(url, timeout=10, **verify)
            return response.status_code, response.text
        pool = urllib3.PoolManager(**({"ca_certs": ca} if ca else {}))
        response = pool.request("GET", url, timeout=10)
        return response.status, response.data.decode()


    def _try(library, url, ca=None):
        started = time.monotonic()
        try:
            status, text = _get(library, url, ca)
            outcome = f"OK:{status}:{text}"
        except Exception as exc:  # noqa: BLE001 - the tenant's report
            outcome = f"{type(exc).__name__}:{exc}"[:600]
        return {"outcome": outcome, "seconds": time.monotonic() - started}


    class Clients:
        def __init__(self, env):
            self.env = env

        def run(self, event, step):
            p = event["params"]

            def calls():
                ca = "/tmp/egress-test-ca.pem"
                with open(ca, "w") as f:
                    f.write(p["ca"])
                found = {"versions": {m.__name__: m.__version__ for m in (requests, httpx, urllib3)}}
                for library in ("requests", "httpx", "urllib3"):
                    for label, url in p["public"].items():
                        found[f"{library} {label}"] = _try(library, url.format(library=library))
                    found[f"{library} https"] = _try(library, p["https"].format(library=library), ca)
                    for label, url in p["refused"].items():
                        found[f"{library} {label}"] = _try(library, url)
                return found

            return step.do("calls", calls)
    """
)


def test_requests_httpx_and_urllib3_reach_public_addresses_and_get_clear_refusals(stack, world):
    """Tenant code pins ``requests``, ``httpx`` and ``urllib3`` (installed by the host from a
    wheelhouse the test repacks from this interpreter: no registry) and uses each plainly: a GET
    by address, by name and over verified HTTPS reaches the public test server; a GET to the
    host's loopback, to the stack's own API and to the link-local address fails at once with the
    proxy's reason (docs/egress.md)."""
    from tests.support import wheels

    versions = wheels.http_clients_wheelhouse(os.environ["TAKOHOST_WHEELHOUSE"])
    pins = [f"{name}=={versions[name]}" for name in wheels.HTTP_CLIENT_DISTRIBUTIONS]
    deployed = workflows.deploy_http(
        stack.api_url, stack.token, stack.space, source=CLIENTS_SOURCE, class_name="Clients", requirements=pins
    )
    api_port = int(stack.api_url.rsplit(":", 1)[1])
    refused = {
        "loopback": f"http://127.0.0.1:{world['service_port']}/secret",
        "api": f"http://127.0.0.1:{api_port}/v2/openapi.json",
        "linklocal": f"http://{world['linklocal']}/latest/meta-data/",
    }
    params = {
        "public": {"by_address": f"http://{PUBLIC}/{{library}}/plain", "by_name": "http://public.test/{library}/named"},
        "https": "https://public.test/{library}/secure",
        "refused": refused,
        "ca": world["ca"],
    }
    http = stack.instances(deployed.workflow)
    instance_id = f"clients-{uuid.uuid4().hex[:8]}"
    code, body = http.call("POST", body={"id": instance_id, "params": params})
    assert code == 201, body
    final = wait_terminal(http, instance_id, timeout=120)
    assert final["status"] == "complete", final
    found = final["output"]
    assert found.pop("versions") == {name: versions[name] for name in wheels.HTTP_CLIENT_DISTRIBUTIONS}
    for library in wheels.HTTP_CLIENT_DISTRIBUTIONS:
        assert found[f"{library} by_address"]["outcome"] == f"OK:200:hello from the internet /{library}/plain"
        assert found[f"{library} by_name"]["outcome"] == f"OK:200:hello from the internet /{library}/named"
        assert found[f"{library} https"]["outcome"] == f"OK:200:hello from the internet /{library}/secure"
        assert f"public.test/{library}/named" in world["http_seen"]
        assert f"{PUBLIC}/{library}/plain" in world["http_seen"]
        assert f"public.test/{library}/secure" in world["https_seen"]
        reasons = {
            "loopback": f"egress to 127.0.0.1:{world['service_port']} refused: loopback address",
            "api": f"egress to 127.0.0.1:{api_port} refused: loopback address",
            "linklocal": f"egress to {world['linklocal']}:80 refused: link-local address",
        }
        for label, reason in reasons.items():
            result = found[f"{library} {label}"]
            assert not result["outcome"].startswith("OK"), (library, label, result)
            assert reason in result["outcome"], (library, label, result)
            assert result["seconds"] < 3, f"{library} {label}: a refusal must fail fast, not retry into a timeout"
    time.sleep(0.5)
    _services_untouched(world)


def _shared(tmp_path_factory) -> str:
    return os.environ["TAKOHOST_TEST_SANDBOX_SHARED_DIR"]


def test_a_listener_is_reachable_from_nowhere_else(stack, tenants, world, tmp_path_factory):
    shared = _shared(tmp_path_factory)
    tag = f"listen-{uuid.uuid4().hex[:8]}"
    abstract = f"takohost-attack-{uuid.uuid4().hex[:8]}"
    started = run_attack(
        tenants["a"], "listen", {"shared": shared, "tag": tag, "abstract": abstract}, wait=False
    )
    port_file = os.path.join(shared, tag + ".port")
    workflows.wait_until(lambda: os.path.exists(port_file), timeout=60, message="the tenant's listener")
    port = int(open(port_file).read())
    try:
        # the host: the port on any of its addresses is not the tenant's
        for host in ("127.0.0.1", "0.0.0.0", *socket.gethostbyname_ex(socket.gethostname())[2]):
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((host, port)) == 0:
                    s.settimeout(1)
                    with contextlib.suppress(OSError):
                        assert s.recv(16) != b"TENANT", f"the tenant's listener answered on the host's {host}"
        # the host's namespace never had the tenant's abstract name: the host can take it
        with socket.socket(socket.AF_UNIX) as mine:
            mine.bind("\0" + abstract)
        # another Space's context reaches neither
        probe = _found(run_attack(tenants["b"], "probe_port", {"port": port, "abstract": abstract}))
        assert not probe["tcp"].startswith("OK"), probe
        assert not probe["abstract"].startswith("OK"), probe
    finally:
        open(os.path.join(shared, tag + ".done"), "w").close()
    found = _found(wait_terminal(tenants["a"], started["id"]))
    assert found["seen"] == []


def test_import_time_code_gets_no_further_during_validation(stack, world):
    """The Version's import runs at validation, in the same sandbox: public egress, and the same
    refusals."""
    targets = [
        ("127.0.0.1", world["service_port"]),
        (world["linklocal"], 80),
        ("127.0.0.1", int(stack.api_url.rsplit(":", 1)[1])),
    ]
    source = textwrap.dedent(
        f"""
        import json, socket
        found = {{}}
        for host, port in {targets!r}:
            for route in ("connect", "fastopen"):
                s = socket.socket()
                s.settimeout(3)
                try:
                    if route == "connect":
                        socket.socket.__mro__[1].connect(s, (host, port))
                        s.sendall(b"IMPORT")
                    else:
                        s.sendto(b"IMPORT", socket.MSG_FASTOPEN, (host, port))
                    found[f"{{route}} {{host}}:{{port}}"] = "OK:" + repr(s.recv(32))
                except OSError as exc:
                    found[f"{{route}} {{host}}:{{port}}"] = type(exc).__name__
                finally:
                    s.close()
        import urllib.request
        found["public"] = urllib.request.urlopen("http://{PUBLIC}/import-time", timeout=5).read().decode()
        raise ImportError("FOUND " + json.dumps(found))
        """
    )
    import requests

    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {stack.token}"
    worker = workflows._create_http(session, stack.api_url, stack.space, "ModuleWorker", {})
    body = {
        "form": workflows.FORM.format("WorkerVersion/" + workflows.FORM_VERSIONS["WorkerVersion"]),
        "name": f"r{uuid.uuid4().hex[:12]}",
        "spec": workflows.version_spec(worker=worker, source=source),
    }
    response = session.post(
        f"{stack.api_url}/v2/spaces/{stack.space}/resources", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )
    assert response.status_code == 202, response.text
    operation = response.json()
    deadline = time.monotonic() + 60
    while operation["state"] in ("pending", "running") and time.monotonic() < deadline:
        time.sleep(0.1)
        operation = session.get(f"{stack.api_url}/v2/spaces/{stack.space}/operations/{operation['id']}").json()
    assert operation["state"] == "failed", operation
    message = operation["error"]["message"]
    assert "FOUND " in message, message
    found = json.loads(message.split("FOUND ", 1)[1].rsplit(" (main.py", 1)[0])
    assert found.pop("public") == "hello from the internet /import-time"  # public egress works at import
    assert len(found) == 6 and found[f"connect 127.0.0.1:{world['service_port']}"] == "ConnectionResetError", found
    assert all(not value.startswith("OK") or "HOST-SECRET" not in value for value in found.values()), found
    time.sleep(0.3)
    _services_untouched(world)
