"""workers.owned_process: the owner's side of a helper process (the zygote, the egress proxy) —
started with a control and a ready pipe, it exits when the control pipe closes; only the owner
reaps it and removes its directory."""

from __future__ import annotations

import os
import sys

import pytest

from workers import owned_process
from workers.sandbox import zygote

# A helper: answers on its ready pipe, then exits once its control pipe is closed.
HELPER = """
import os, sys
control, ready = int(sys.argv[1]), int(sys.argv[2])
os.write(ready, sys.argv[3].encode())
os.close(ready)
os.read(control, 1)
"""


class Helper(owned_process.OwnedProcess):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.dropped = 0
        self._init_owned()

    def start(self, timeout: float = 10.0) -> bytes:  # type: ignore[override]  # the answer, for the tests
        self._make_dir(prefix="takohost-test-helper-", socket_name="helper.sock")
        return self._launch(
            lambda control, ready: [sys.executable, "-c", HELPER, str(control), str(ready), self.answer],
            timeout=timeout,
        )

    def _drop_client(self) -> None:
        self.dropped += 1


def test_the_owner_starts_hears_ready_and_stops_reaps_and_cleans_up():
    helper = Helper("ready")
    assert not helper.running and helper.socket_path is None
    assert helper.start() == b"ready"
    assert helper.running
    directory = os.path.dirname(helper.socket_path or "")
    assert os.path.isdir(directory)
    proc = helper._proc
    helper.stop()
    assert helper.dropped == 1
    assert proc is not None and proc.returncode == 0  # it exited by itself once the pipe closed
    assert not helper.running and not os.path.exists(directory)


def test_a_forked_process_only_drops_its_connection():
    helper = Helper("ready")
    helper.start()
    try:
        pid = os.fork()
        if pid == 0:  # a forked worker: the helper is not its child
            code = 0
            try:
                helper.stop()
                code = 0 if helper.dropped == 1 and helper.running else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert helper._proc is not None and helper._proc.poll() is None  # still running for its owner
    finally:
        helper.stop()


def test_no_answer_within_the_timeout_is_an_empty_answer():
    read_end, write_end = os.pipe()
    try:
        assert owned_process.OwnedProcess._await_ready(read_end, 0.05) == b""
    finally:
        os.close(write_end)


def test_an_error_answer_stops_the_helper_and_is_the_reason():
    helper = Helper("error no rules file")
    answer = helper.start()
    proc = helper._proc
    with pytest.raises(RuntimeError, match="^no rules file$"):
        helper._check_ready(answer, timeout=1.0)
    assert proc is not None and proc.returncode is not None and not helper.running


def test_a_connection_before_the_start_is_refused():
    with pytest.raises(RuntimeError, match="the helper was not started"):
        Helper("ready")._connection()


#: An interpreter that answers the zygote's probe of its home, then, as the zygote, never says
#: ready: it waits for its control pipe (``--control-fd``) to close.
SILENT_INTERPRETER = """#!{python}
import os, sys
if sys.argv[1] == "-I":
    print(sys.base_prefix + ":" + sys.base_exec_prefix)
    sys.exit(0)
os.read(int(sys.argv[sys.argv.index("--control-fd") + 1]), 1)
"""


def test_a_zygote_silent_at_the_timeout_did_not_become_ready(tmp_path):
    # It is still running when the wait ends: its status is read before the stop reaps it.
    python = tmp_path / "python"
    python.write_text(SILENT_INTERPRETER.format(python=sys.executable))
    python.chmod(0o755)
    silent = zygote.Zygote(python=str(python))
    with pytest.raises(zygote.ZygoteUnavailable, match=r"^the zygote did not become ready within 0.3 s$"):
        silent.start(timeout=0.3)
    assert not silent.running
