"""Process hygiene of a freshly forked sandbox child: a session of its own, death with the
zygote (``PR_SET_PDEATHSIG``), default signal dispositions, no descriptor but stdio and the link
to the zygote, and the one way a child ends (:func:`die`).

Standard library only: this runs in the zygote (``prepare``, ``prctl``) and its children.
"""

from __future__ import annotations

import _signal
import ctypes
import os
import shutil
import signal
import sys
import threading
from typing import Any, NoReturn

from takohost.runtime.isolation import forking

__all__ = [
    "CHANNEL_FD",
    "die",
    "enter_workdir",
    "forget_the_zygote_thread",
    "harden",
    "prctl",
    "prepare",
    "set_pdeathsig",
]

#: The child's descriptor of its channel to the parent (first the link to the zygote).
CHANNEL_FD = 3

_PR_SET_PDEATHSIG = 1
_libc: Any = None


def prepare() -> None:
    """Load what the child needs from C before forking (called once in the zygote)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    """``prctl(option, value, 0, 0, 0)`` via libc; ``OSError`` if the kernel refuses."""
    prepare()
    if _libc.prctl(int(option), int(value), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def set_pdeathsig(sig: int) -> None:
    """``PR_SET_PDEATHSIG``: the kernel sends ``sig`` when the thread that forked us dies."""
    prctl(_PR_SET_PDEATHSIG, sig)


def die() -> NoReturn:
    """Kill the own process group and exit now (as PID 1 of the context's PID namespace, the exit
    also kills every process left in the namespace, whatever its group or session)."""
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(137)


_DEFAULT_SIGNALS = tuple(
    int(sig)
    for sig in (
        signal.SIGCHLD,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
    )
)


def harden(*, link_fd: int, zygote_pid: int, keep_stderr: bool, forker: forking.Forker) -> None:
    """Step 1 of a child's life (see ``takohost.runtime.child``): a session of its own, killed
    with the zygote, default signals, the zygote link ``link_fd`` moved to :data:`CHANNEL_FD`,
    every other descriptor closed but the ``forker``'s (its ``enter`` closes them) and stdio on
    ``/dev/null`` (stderr kept when ``keep_stderr``). A child without isolation whose parent is
    no longer ``zygote_pid`` exits."""
    os.setsid()
    set_pdeathsig(signal.SIGKILL)
    # The zygote died before PDEATHSIG was armed (in its own PID namespace the child sees its
    # parent as pid 0; there a dead zygote shows as EOF on the link instead).
    if not forker.isolated and os.getppid() != zygote_pid:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    # The C module's functions: the signal module's enum conversions cost a fresh child about
    # 0.2 ms of copy-on-write faults.
    for sig in _DEFAULT_SIGNALS:
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
    if link_fd != CHANNEL_FD:
        os.dup2(link_fd, CHANNEL_FD, inheritable=False)
    keep = sorted(fd for fd in (forker.template_fd, forker.pidns_fd) if fd > CHANNEL_FD)
    low = CHANNEL_FD + 1
    for fd in keep:  # the forker's descriptors: enter() closes them
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1) if keep_stderr else (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    # The environment is the zygote's, isolation.policy.CONTEXT_ENV (zygote.main): resetting it here
    # cost every child about 0.4 ms of os.environ's Python code in copy-on-write faults.
    sys.argv = [""]


def forget_the_zygote_thread() -> None:
    """``threading`` records the main thread's native id once, in the zygote: there it would tell
    tenant code the zygote's pid on the host (``threading.main_thread().native_id``). Here it is
    the child's own."""
    main = threading.main_thread()
    if hasattr(main, "_native_id"):
        main._native_id = threading.get_native_id()


def enter_workdir(children_dir: str) -> None:
    """``mode == "none"``: a fresh empty working directory (the zygote removes it afterwards)."""
    workdir = os.path.join(children_dir, str(os.getpid()))
    try:
        os.mkdir(workdir, 0o700)
    except FileExistsError:  # never inherit another context's files
        shutil.rmtree(workdir)
        os.mkdir(workdir, 0o700)
    os.chdir(workdir)


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 1024)
    except (ValueError, OSError):
        return 65536
