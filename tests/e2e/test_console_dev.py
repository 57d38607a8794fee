"""``takohost dev`` serves the web console and prints its URL (docs/spec/host-features.md#hf-console).

A real ``takohost dev`` on a fresh data dir (embedded PostgreSQL and Redis): its banner names
``http://127.0.0.1:PORT/ui/``; that page is the sign-in form, served with the console's own
script and style sheet (nothing from another origin), and the printed token signs in.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import requests

from tests.integration.test_cli import _wait_running
from tests.support import processes


def test_dev_prints_the_console_url_and_serves_it(tmp_path):
    port = processes.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOHOST_")}
    dev = subprocess.Popen(
        [sys.executable, "-m", "host_cli", "dev", "--port", str(port), "--data-dir", str(tmp_path / "d")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    try:
        printed = _wait_running(dev)
        url = f"http://127.0.0.1:{port}/ui/"
        assert f"Console: {url}" in printed, printed
        token = re.search(r"Token:\s+(\S+)", printed).group(1)
        page = requests.get(url, timeout=10)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        assert 'label for="token"' in page.text
        assets = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', page.text)
        assert len(assets) == 2 and all(a.startswith("/ui/static/") for a in assets), assets  # no CDN
        for asset in assets:
            assert requests.get(f"http://127.0.0.1:{port}{asset}", timeout=10).status_code == 200
        session = requests.Session()
        signed = session.post(f"{url}sign-in", data={"token": token}, timeout=10)
        assert signed.status_code == 200 and "Space <strong" in signed.text and ">dev<" in signed.text
    finally:
        if dev.poll() is None:
            os.kill(dev.pid, signal.SIGTERM)
            try:
                dev.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
