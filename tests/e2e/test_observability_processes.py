"""Metrics, JSON host logs and the where-is-it view through real ``takohost api``, ``worker``
(a supervisor and its solo processes) and ``beat`` processes (docs/spec/host-features.md#hf-observability)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import processes, workflows

OBS = """
class Obs:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        mode = event["params"]["mode"]
        if mode == "retry":
            step.do("charge", lambda: 1 / 0, {"maxAttempts": 3, "initialDelaySeconds": 3600})
        elif mode == "nap":
            step.sleep("nap", 1)
        elif mode == "slow":
            import os, time
            def effect():
                while not os.path.exists(event["params"]["go"]):
                    time.sleep(0.05)
                return {}
            step.do("slow effect", effect)
        else:
            step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 600})
        return {"mode": mode}
"""


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: dict, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(
        value
        for (sample, got), value in samples.items()
        if sample == name and all(dict(got).get(k) == v for k, v in labels.items())
    )


def _start_api(env: dict, port: int, metrics_port: int) -> processes.HostProcess:
    api = processes._start("api", ["api", f"--port={port}", "--workers=2", f"--metrics-port={metrics_port}"], env)
    api.extra["url"] = f"http://127.0.0.1:{port}"
    workflows.wait_until(
        lambda: _healthy(api.extra["url"]) or (not api.alive() and RuntimeError(api.log())),
        timeout=60,
        message="api healthy",
    )
    assert api.alive(), api.log()
    return api


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _json_lines(process: processes.HostProcess) -> list[dict]:
    lines = []
    for line in process.log().splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                pass
    return lines


def test_metrics_json_logs_and_progress_through_real_processes(tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "worker-999999999").mkdir()  # a command that is gone: removed at start
    ports = {role: processes.free_port() for role in ("api", "api_metrics", "worker", "beat")}
    env = {"TAKOHOST_METRICS_DIR": str(metrics_dir), "TAKOHOST_LOG_FORMAT": "json"}
    with workflows.private_stack(api=False, workers=0, beat=False, extra_env=env) as stack:
        api = _start_api(stack.env, ports["api"], ports["api_metrics"])
        stack.processes.append(api)
        stack.api_url = api.extra["url"]
        worker = processes._start("worker", ["worker", "--concurrency=2", f"--metrics-port={ports['worker']}"],
                                  stack.env)
        stack.processes.append(worker)
        processes.wait_for_log(worker, "ready.", timeout=90)
        beat = processes._start("beat", ["beat", f"--metrics-port={ports['beat']}"], stack.env)
        stack.processes.append(beat)
        processes.wait_for_log(beat, "beat: Starting", timeout=60)
        assert not (metrics_dir / "worker-999999999").exists()
        assert {p.name.split("-")[0] for p in metrics_dir.iterdir()} == {"api", "worker", "beat"}

        deployed = workflows.deploy_http(stack.api_url, stack.token, stack.space, source=OBS, class_name="Obs")
        wf = deployed.workflow
        http = stack.instances(wf)
        for mode in ("retry", "wait", "nap"):
            code, body = http.call("POST", "", {"id": mode, "params": {"mode": mode}})
            assert code == 201, body

        def progress(instance_id: str) -> dict:
            code, body = http.call("GET", f"/{instance_id}/progress")
            assert code == 200, body
            return body

        retry = workflows.wait_until(
            lambda: (p := progress("retry"))["activity"] == "retrying" and p, timeout=60, message="retrying"
        )
        assert retry["step"] == {"name": "charge", "kind": "do", "attempt": 2}
        assert retry["lastError"]["type"] == "ZeroDivisionError" and "retryAt" in retry
        wait = workflows.wait_until(
            lambda: (p := progress("wait"))["activity"] == "waiting" and p, timeout=60, message="waiting"
        )
        assert wait["eventType"] == "approved" and "timeoutAt" in wait and wait["step"]["name"] == "approval"
        assert http.status("wait") == {"id": "wait", "status": "waiting"}  # the spec's shape (docs/spec/durable-workflow.md#dw-status), unchanged
        go = tmp_path / "go"
        code, body = http.call("POST", "", {"id": "slow", "params": {"mode": "slow", "go": str(go)}})
        assert code == 201, body
        slow = workflows.wait_until(  # published by the worker's heartbeat (every 0.75 s here)
            lambda: (p := progress("slow")).get("step") and p, timeout=30, message="running step shown"
        )
        assert slow["activity"] == "running" and slow["step"] == {"name": "slow effect", "kind": "do", "attempt": 1}
        assert "since" in slow
        # the CLI shows the same for a non-terminal instance
        cli_env = {**os.environ, "TAKOHOST_URL": stack.api_url, "TAKOHOST_TOKEN": stack.token, "TAKOHOST_SPACE": stack.space,
                   "COLUMNS": "300"}
        shown = {}
        for instance_id in ("retry", "wait"):
            done = subprocess.run(
                [sys.executable, "-m", "host_cli", "instances", "status", wf, instance_id],
                env=cli_env, capture_output=True, text=True, timeout=60,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            shown[instance_id] = done.stdout
        assert "retrying step 'charge' (attempt 2 at " in shown["retry"], shown["retry"]
        assert "attempt 1 failed: ZeroDivisionError" in shown["retry"]
        assert "waiting for event 'approved' (step 'approval', until " in shown["wait"], shown["wait"]
        go.touch()
        workflows.wait_until(lambda: http.status("slow")["status"] == "complete", timeout=60, message="slow done")
        assert "step" not in progress("slow")
        workflows.wait_until(lambda: http.status("nap")["status"] == "complete", timeout=60, message="nap done")
        code, _ = http.call("POST", "/wait/events", {"type": "approved"})
        assert code == 202
        workflows.wait_until(lambda: http.status("wait")["status"] == "complete", timeout=60, message="wait done")
        assert progress("wait")["activity"] == "finished"

        # --- metrics: each command sums its own processes ---
        api_samples = _scrape(ports["api_metrics"])
        assert _value(api_samples, "takohost_instances_started_total", space=stack.space, workflow=wf) == 4
        route = "/v2/spaces/<space>/resources/<uid>/instances"
        assert _value(api_samples, "takohost_http_request_duration_seconds_count",
                      method="POST", route=route, status="201") == 4
        assert _value(api_samples, "takohost_http_request_duration_seconds_count",
                      method="GET", route=route + "/<id>/progress", status="200") >= 3
        worker_samples = workflows.wait_until(
            lambda: (s := _scrape(ports["worker"]))
            and _value(s, "takohost_instances_finished_total", workflow=wf, status="complete") == 3
            and s,
            timeout=30,
            message="finished instances counted",
        )
        assert _value(worker_samples, "takohost_context_duration_seconds_count", outcome="waiting") >= 1
        assert _value(worker_samples, "takohost_context_duration_seconds_count", outcome="retry") >= 1
        assert _value(worker_samples, "takohost_sandbox_spawn_seconds_count") >= 4
        assert _value(worker_samples, "takohost_step_commit_seconds_count", kind="attempt") >= 1
        assert _value(worker_samples, "takohost_step_commit_seconds_count", kind="terminal") >= 2
        assert _value(worker_samples, "takohost_timer_lateness_seconds_count", kind="wake") >= 1
        assert _value(worker_samples, "takohost_operation_duration_seconds_count",
                      form="WorkerVersion", kind="create", state="succeeded") >= 1
        beat_samples = _scrape(ports["beat"])
        assert _value(beat_samples, "takohost_instances", status="complete") == 3
        assert _value(beat_samples, "takohost_instances", status="running") == 1  # the retry delay
        assert ("takohost_broker_queue_depth", (("queue", f"{stack.namespace}.tasks"),)) in beat_samples
        # the tenant-facing port serves no metrics
        anonymous = requests.get(f"{stack.api_url}/metrics", timeout=5)
        tenant = requests.get(
            f"{stack.api_url}/metrics", headers={"Authorization": f"Bearer {stack.token}"}, timeout=5
        )
        assert (anonymous.status_code, tenant.status_code) == (401, 404)

        # --- worker log lines about an instance name it (JSON) ---
        ended = [line for line in _json_lines(worker) if line.get("message") == "context ended"]
        assert ended, worker.log()[-3000:]
        for line in ended:
            assert {"workflow", "space", "instance_id", "instance", "epoch", "outcome"} <= set(line), line
        waits = [line for line in ended if line["instance_id"] == "wait"]
        assert {line["outcome"] for line in waits} >= {"waiting", "complete"}
        assert all(line["workflow"] == wf and line["space"] == stack.space for line in waits)
        assert [line["epoch"] for line in waits] == sorted(line["epoch"] for line in waits)

        # gunicorn's own lines are in the host's format too
        assert any("Listening at" in line.get("message", "") for line in _json_lines(api)), api.log()[:2000]

        # --- a stopped command removes its multiprocess directory ---
        worker.stop(timeout=30)
        time.sleep(0.5)
        assert {p.name.split("-")[0] for p in metrics_dir.iterdir()} == {"api", "beat"}, os.listdir(metrics_dir)


def test_a_taken_metrics_port_stops_the_command_with_the_reason():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "host_cli", "beat", f"--metrics-port={port}"],
            capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert f"cannot serve metrics on port {port}" in done.stderr


def test_a_metrics_port_variable_that_is_no_port_is_a_usage_error():
    """``TAKOHOST_METRICS_PORT=abc``: exit 2 with the variable's name, not a ``ValueError``
    traceback (as before), for the three commands and for ``dev``."""
    env = {**os.environ, "TAKOHOST_METRICS_PORT": "abc"}
    for command in (["api", "--port", "1"], ["worker"], ["beat"], ["dev", "--data-dir", "/nonexistent/x"]):
        done = subprocess.run(
            [sys.executable, "-m", "host_cli", *command], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 2, (command, done.stderr[-2000:])
        assert "TAKOHOST_METRICS_PORT must be a port 1-65535, not 'abc'" in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
