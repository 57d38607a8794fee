"""A worker that cannot isolate tenant code refuses to start, and says why (issue "Tenant
isolation" item 1). Simulated the way a container without CAP_SYS_ADMIN looks: root whose
bounding set lacks ``cap_sys_admin`` (``setpriv``), so ``unshare`` of the namespaces fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

SETPRIV = shutil.which("setpriv")


def _without_sys_admin(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    assert SETPRIV is not None, "util-linux setpriv is needed for this test"
    return subprocess.run(
        [SETPRIV, "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", *argv],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="simulates a root container; needs root")
def test_worker_refuses_to_start_without_namespaces():
    done = _without_sys_admin(sys.executable, "-c", "from host_cli.main import main; main()", "worker")
    assert done.returncode != 0
    assert "cannot isolate tenant code" in done.stderr
    assert "TAKOHOST_SANDBOX_ISOLATION=none" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="simulates a root container; needs root")
def test_zygote_refuses_with_the_reason_on_its_ready_pipe():
    code = (
        "from workers import sandbox\n"
        "z = sandbox.Zygote()\n"
        "try:\n"
        "    z.start()\n"
        "except sandbox.ZygoteUnavailable as exc:\n"
        "    print('REFUSED', exc)\n"
        "else:\n"
        "    print('STARTED')\n"
        "    z.stop()\n"
    )
    done = _without_sys_admin(sys.executable, "-c", code)
    assert done.stdout.startswith("REFUSED the sandbox cannot isolate tenant code"), done.stdout + done.stderr
    assert "unshare" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="simulates a root container; needs root")
def test_the_documented_opt_out_starts_without_isolation():
    code = (
        "from workers import sandbox\n"
        "z = sandbox.Zygote()\n"
        "z.start()\n"
        "print('STARTED', z.policy.mode)\n"
        "z.stop()\n"
    )
    done = _without_sys_admin(sys.executable, "-c", code, env={"TAKOHOST_SANDBOX_ISOLATION": "none"})
    assert done.stdout.strip() == "STARTED none", done.stdout + done.stderr
