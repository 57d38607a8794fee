"""The pool of per-context uids (``isolation.uids``): a slot is held while its context lives,
by whichever zygote of the machine took it, and never derived from a host pid."""

from __future__ import annotations

import os

import pytest

from takohost.runtime.isolation import syscalls, uids


def test_slots_are_distinct_while_held_and_reused_after(tmp_path):
    pool = uids.UidPool(5000, directory=str(tmp_path), slots=3)
    taken = {pool.take(), pool.take(), pool.take()}
    assert taken == {5000, 5001, 5002}
    with pytest.raises(syscalls.IsolationUnavailable, match="every one of the 3"):
        pool.take()
    pool.give_back(5001)
    assert pool.take() == 5001
    pool.close()
    assert pool.held == {}


def test_a_slot_held_by_another_process_is_not_taken(tmp_path):
    """Two zygotes (here: this process and a forked one) share the directory."""
    reader, writer = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other zygote: takes both slots and holds them until told to stop
        other = uids.UidPool(7000, directory=str(tmp_path), slots=2)
        other.take()
        other.take()
        os.write(writer, b"held")
        os.read(release_r, 1)
        os._exit(0)
    os.close(writer)
    assert os.read(reader, 16) == b"held"
    pool = uids.UidPool(7000, directory=str(tmp_path), slots=2)
    with pytest.raises(syscalls.IsolationUnavailable):
        pool.take()
    os.write(release_w, b"x")
    os.waitpid(pid, 0)  # its locks went with it
    assert pool.take() in (7000, 7001)
    pool.close()
    for fd in (reader, release_r, release_w):
        os.close(fd)


def test_a_child_closing_its_copy_does_not_release_the_slot(tmp_path):
    """The lock belongs to the zygote's open file description: a forked child (the context)
    that closes its inherited descriptor releases nothing."""
    pool = uids.UidPool(9000, directory=str(tmp_path), slots=1)
    uid = pool.take()
    pid = os.fork()
    if pid == 0:
        os.close(pool.held[uid])
        os._exit(0)
    os.waitpid(pid, 0)
    other = uids.UidPool(9000, directory=str(tmp_path), slots=1)
    with pytest.raises(syscalls.IsolationUnavailable):
        other.take()
    pool.close()
    assert other.take() == 9000
    other.close()
