"""The bounds of the API's request reader (docs/spec/host-features.md#hf-neighbours, ``host_api/server.py``): at most
``max_readers`` connections read a request at once per process — one more closes the one reading
longest, so a flood of slow clients cannot keep a new one out — and the bytes they buffer are
bounded. A real gunicorn with the API's worker class, its limits made small, serving a tiny app.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import requests

from tests.support import processes

SERVER = textwrap.dedent('''
    import sys
    import flask
    from gunicorn.app.base import BaseApplication
    from host_api.server import JsonErrorThreadWorker

    worker = type("Small", (JsonErrorThreadWorker,), {"max_readers": 4, "max_buffered": 100_000})
    app = flask.Flask("t")

    @app.route("/echo", methods=["GET", "POST"])
    def echo():
        return str(len(flask.request.get_data()))

    class Server(BaseApplication):
        def load_config(self):
            for key, value in {"bind": f"127.0.0.1:{sys.argv[1]}", "workers": 1, "threads": 2,
                               "worker_class": worker, "accesslog": None,
                               "control_socket_disable": True}.items():
                self.cfg.set(key, value)

        def load(self):
            return app

    Server().run()
''')


@pytest.fixture()
def server(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = processes.free_port()
    proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(f"{url}/echo", timeout=1)
            break
        except requests.RequestException:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the test server did not start") from None
            time.sleep(0.2)
    yield ("127.0.0.1", port), url
    proc.terminate()
    proc.wait(10)


def _answer(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _json_status(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_one_reader_too_many_closes_the_oldest(server):
    addr, url = server
    slow = []
    for _ in range(4):
        sock = socket.create_connection(addr, timeout=5)
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\n")  # a head that never ends
        slow.append(sock)
        time.sleep(0.05)
    time.sleep(0.3)
    assert requests.get(f"{url}/echo", timeout=5).status_code == 200  # a fifth reader gets in
    status, body = _json_status(_answer(slow[0]))
    assert status == 503 and body["error"]["code"] == "backend_unavailable"
    for sock in slow[1:]:  # the others are still being read
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        sock.close()


def test_buffered_bytes_are_bounded(server):
    addr, url = server
    first = socket.create_connection(addr, timeout=5)
    first.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 90000\r\n\r\n" + b"a" * 80_000)
    time.sleep(0.3)
    second = socket.create_connection(addr, timeout=5)
    second.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 50000\r\n\r\n" + b"b" * 30_000)
    status, body = _json_status(_answer(second))
    assert status == 503 and body["error"]["code"] == "backend_unavailable"  # it went over the bound
    first.sendall(b"a" * 10_000)
    answer = _answer(first, timeout=2.0)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"90000"), answer[:300]
    first.close()
    assert requests.post(f"{url}/echo", data=b"c" * 60_000, timeout=5).text == "60000"  # memory was given back
