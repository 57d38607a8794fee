"""Attack: an unauthenticated HTTP client blows up the API's Prometheus label sets.

``takohost_http_request_duration_seconds`` is labelled by method, route template and status. The
route is a template and the status one the app chose, but the method is the client's: gunicorn
accepts any RFC 9110 token of 3-20 characters without lower case (``ZZ0001``, ``Q!$%``, …), and
every new one made a new histogram child (17 samples, in process memory and in the multiprocess
files the metrics endpoint sums at every scrape), before authentication. A real ``takohost api
--metrics-port`` is sent requests with 300 made-up methods; the scrape keeps a bounded set.
"""

from __future__ import annotations

import socket

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import processes

METHODS = 300


def _send(addr: tuple[str, int], method: str) -> bytes:
    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(f"{method} /v2/spaces/x/resources HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_made_up_http_methods_do_not_make_new_metric_label_sets(db_url):
    port, metrics_port = processes.free_port(), processes.free_port()
    api = processes._start("api", ["api", f"--port={port}", "--workers=2", f"--metrics-port={metrics_port}"], None)
    api.extra["url"] = f"http://127.0.0.1:{port}"
    try:
        processes.wait_ready(api)
        for i in range(METHODS):
            answer = _send(("127.0.0.1", port), f"ZZ{i:04d}")
            assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
        methods = set()
        for family in text_string_to_metric_families(text):
            if family.name == "takohost_http_request_duration_seconds":
                methods |= {s.labels["method"] for s in family.samples if "method" in s.labels}
        assert methods, "the requests were not measured at all"
        assert len(methods) <= 10, f"{len(methods)} method label values, e.g. {sorted(methods)[:5]}"
    finally:
        api.stop()
