"""``takohost dev --metrics-port``: one Prometheus endpoint for the whole embedded stack (README
"Metrics").

A real ``takohost dev`` on a fresh data dir, given its metrics port the way an operator of the
other commands does (``TAKOHOST_METRICS_PORT``). Before, dev passed that variable on to its API,
worker and beat, and all three tried to bind the one port: two of them exited and were
restarted for ever. Now the supervisor serves it: the banner names the endpoint, and one scrape
shows what the API (the create), the worker (the context) and the beat (the host-wide gauge)
recorded; no child restarts; the directory goes at stop.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import requests

from tests.e2e.test_observability_processes import _scrape, _value
from tests.integration.test_cli import _wait_running
from tests.support import processes, workflows

SOURCE = """
class Hello:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("greet", lambda: {"hello": event["params"]["who"]})
"""


def test_dev_serves_the_metrics_of_api_worker_and_beat_on_one_port(tmp_path):
    port, metrics_port = processes.free_port(), processes.free_port()
    data = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOHOST_")}
    env["TAKOHOST_METRICS_PORT"] = str(metrics_port)
    dev = subprocess.Popen(
        [sys.executable, "-m", "host_cli", "dev", "--port", str(port), "--data-dir", str(data)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    try:
        printed = _wait_running(dev)
        assert f"Metrics: http://127.0.0.1:{metrics_port}/metrics" in printed, printed
        token = re.search(r"Token:\s+(\S+)", printed).group(1)
        base = f"http://127.0.0.1:{port}"
        deployed = workflows.deploy_http(base, token, "dev", source=SOURCE, class_name="Hello")
        headers = {"Authorization": f"Bearer {token}"}
        prefix = f"{base}/v2/spaces/dev/resources/{deployed.workflow}/instances"
        created = requests.post(prefix, json={"id": "m1", "params": {"who": "x"}}, headers=headers, timeout=10)
        assert created.status_code == 201, created.text
        workflows.wait_until(
            lambda: requests.get(f"{prefix}/m1", headers=headers, timeout=10).json()["status"] == "complete",
            timeout=120,
        )

        def scraped() -> dict:
            samples = _scrape(metrics_port)
            return samples if _value(samples, "takohost_instances", status="complete") >= 1 else {}

        samples = workflows.wait_until(scraped, timeout=30)
        workflow = deployed.workflow
        assert _value(samples, "takohost_instances_started_total", space="dev", workflow=workflow) == 1  # api
        assert _value(samples, "takohost_instances_finished_total", workflow=workflow, status="complete") == 1
        assert _value(samples, "takohost_context_duration_seconds_count", outcome="complete") >= 1  # worker
        assert _value(samples, "takohost_http_request_duration_seconds_count", method="POST") >= 1
        # The tenant-facing API port never serves them.
        assert requests.get(f"{base}/metrics", timeout=10).status_code in (401, 404)
        assert list((data / "metrics").iterdir()) == [data / "metrics" / f"dev-{dev.pid}"]
    finally:
        if dev.poll() is None:
            os.kill(dev.pid, signal.SIGTERM)
        try:
            _, err = dev.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            raise
    assert dev.returncode == 0
    assert "restarting" not in err, err  # no child fought over the port
    assert list((data / "metrics").iterdir()) == []
