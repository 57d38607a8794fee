"""``takohost dev`` with a Version that pins a package (README "Writing a workflow";
docs/packages.md): a real dev stack on a fresh data dir, its layers in the user's cache (one
directory per data dir, never inside the data dir), a wheel built by the test in the wheelhouse
(no registry). The Version validates against its layer and an instance's step imports it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import requests

from tests.integration.test_cli import _wait_running
from tests.support import processes, wheels, workflows

SOURCE = """
import tako_dev_greeting

class Hello:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("greet", lambda: {"greeting": tako_dev_greeting.greet(event["params"]["who"])})
"""


def test_dev_installs_a_pinned_package_and_a_step_imports_it(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheels.build_wheel(
        house,
        name="tako-dev-greeting",
        version="0.3",
        files={"tako_dev_greeting/__init__.py": "def greet(who):\n    return f'hello, {who}'\n"},
    )
    port = processes.free_port()
    data = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOHOST_")}
    env.update({"TAKOHOST_WHEELHOUSE": str(house), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    dev = subprocess.Popen(
        [sys.executable, "-m", "host_cli", "dev", "--port", str(port), "--data-dir", str(data)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        printed = _wait_running(dev)
        token = re.search(r"Token:\s+(\S+)", printed).group(1)
        base = f"http://127.0.0.1:{port}"
        deployed = workflows.deploy_http(
            base, token, "dev", source=SOURCE, class_name="Hello", requirements=["tako-dev-greeting==0.3"]
        )
        headers = {"Authorization": f"Bearer {token}"}
        prefix = f"{base}/v2/spaces/dev/resources/{deployed.workflow}/instances"
        created = requests.post(
            prefix, json={"id": "p1", "params": {"who": "ada"}}, headers=headers, timeout=10
        )
        assert created.status_code == 201, created.text

        def completed() -> dict | None:
            status = requests.get(f"{prefix}/p1", headers=headers, timeout=10).json()
            return status if status["status"] == "complete" else None

        final = workflows.wait_until(completed, timeout=120)
        assert final["output"] == {"greeting": "hello, ada"}
        layers = tmp_path / "cache" / "takohost" / "dev-packages"
        (layer_dir,) = list(layers.iterdir())
        assert (layer_dir / "layers").is_dir() and not (data / "packages").exists()
    finally:
        if dev.poll() is None:
            os.kill(dev.pid, signal.SIGTERM)
        try:
            dev.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            raise
    assert dev.returncode == 0
