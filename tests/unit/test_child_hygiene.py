"""Process hygiene of a sandbox child (``takohost.runtime.child.hygiene``): how it dies, the
kernel calls it makes, and its working directory without isolation."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from takohost.runtime.child import hygiene


def test_die_kills_the_whole_process_group_and_exits_137():
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        os.setpgid(0, 0)
        helper = os.fork()
        if helper == 0:  # a process of the same group that would outlive an os._exit
            os.close(writer)
            while True:
                time.sleep(1)
        os.write(writer, str(helper).encode())
        os.close(writer)
        hygiene.die()
    os.close(writer)
    helper = int(os.read(reader, 32))
    os.close(reader)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) in (137, -signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{helper}/stat").read().split(") ")[1].startswith("Z"):
            break  # killed: a zombie waiting for init
        time.sleep(0.01)
    else:
        pytest.fail("the group's other process survived die()")


def test_prctl_raises_the_kernels_error():
    with pytest.raises(OSError) as info:
        hygiene.prctl(-1, 0)
    assert info.value.errno == errno.EINVAL


def test_enter_workdir_makes_a_fresh_private_directory(tmp_path):
    stale = tmp_path / str(os.getpid())
    stale.mkdir()
    (stale / "left-by-another-context").write_text("x")
    here = os.getcwd()
    try:
        hygiene.enter_workdir(str(tmp_path))
        assert os.getcwd() == str(stale)
        assert os.listdir(".") == []
        assert (os.stat(".").st_mode & 0o777) == 0o700
    finally:
        os.chdir(here)
