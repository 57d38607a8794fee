"""The sandbox child: process hygiene after fork, its channel to the parent, and the three jobs
(``validate``, ``workflow``, ``scheduled``). See ``PROTOCOL.md`` for the messages.

Life of a child (forked by ``takohost.runtime.zygote``; ``run_forked`` never returns):

1. hygiene, done ahead of demand (the zygote keeps a few forked children waiting): ``setsid()``,
   ``PR_SET_PDEATHSIG(SIGKILL)`` (dies with the zygote), default signal dispositions, every
   descriptor closed except 0/1/2 (``/dev/null``) and the link to the zygote, empty environment
   but ``PATH``/``LANG``;
2. isolation (``isolation.Forker.enter``): the child, PID 1 of its own PID namespace, joins a
   copy of the minimal read-only root with a private ``/proc`` and scratch ``/tmp`` (the working
   directory) and its own network, IPC and UTS namespaces, drops to its own uid with no
   capabilities and ``no_new_privs`` under a seccomp filter, sets the limits and narrows
   ``sys.path``;
3. the zygote hands over the channel descriptor (it becomes fd 3, replacing the link); the child
   sends ``hello {pid}`` and starts its reader thread, which reads one ``job`` frame (so a child
   spawned ahead of its job is completely ready when the job arrives);
4. the reader thread routes the parent's answers to the waiting call and watches the parent: EOF
   on the channel, or no frame for longer than ``watchdogSeconds`` → the child exits, and with it
   every process of its PID namespace (docs/spec/architecture.md#ar-terminate "Terminate and delete": a child whose parent stops
   answering kills itself);
5. the Version's ``modules`` are installed from memory (``SourceModules``) and ``mainModule`` is
   imported fresh (docs/spec/worker-forms.md#wf-loading), then the job runs;
6. after its final message the child exits: no ``finally:``, ``atexit`` or leftover
   thread/task/process of user code runs afterwards (docs/spec/durable-workflow.md: stop before publishing).

Standard library and ``takohost`` only: this runs user code.

One concern a module: ``hygiene`` (step 1 and :func:`hygiene.die`), ``channel`` (steps 3 and 4),
``importer`` (step 5) and ``jobs`` (the three jobs and the zygote's warm-up); this package ties
them together in :func:`run_forked`.
"""

from __future__ import annotations

import traceback
from typing import NoReturn

from takohost.runtime import capture, protocol
from takohost.runtime.child import channel, hygiene, importer, jobs  # noqa: F401 - importer: the package's parts
from takohost.runtime.isolation import forking

__all__ = ["channel", "hygiene", "importer", "jobs", "run_forked"]


def run_forked(
    *,
    link_fd: int,
    root: str,
    zygote_pid: int,
    forker: forking.Forker,
    keep_stderr: bool = False,
) -> NoReturn:
    """Entry point in a freshly forked child; never returns (every path ends in ``die``).

    The child is forked ahead of demand (the zygote keeps a small pool): it cleans itself up,
    enters its sandbox (``forker.isolated``: it is PID 1 of its own PID namespace, see
    ``isolation.forking.Forker.enter``), then waits on ``link_fd`` (its socket to the zygote) for the
    channel descriptor of its parent. ``root`` is the zygote's directory for the working
    directories of children without isolation (``mode == "none"``).
    """
    try:
        hygiene.harden(link_fd=link_fd, zygote_pid=zygote_pid, keep_stderr=keep_stderr, forker=forker)
        if forker.isolated:
            forker.enter()
        else:
            hygiene.enter_workdir(root)
        hygiene.forget_the_zygote_thread()
        # Everything else a context needs is made while this pre-spawned child waits, so that
        # none of it is on a job's path: the output capture (pipes, streams, its thread; muted
        # until the job) and the reader thread, which receives the channel, says hello and reads
        # the job itself.
        sink = capture.install()
        link = channel.Channel(None, buffer=protocol.FrameBuffer(), watchdog_seconds=None)
        egress = forker.egress
        link.start(expect_job=True, connect=lambda: channel.connect(egress))
        jobs.run_job(link.job(), link, sink=sink)
    except BaseException:  # noqa: BLE001 - nothing may escape into the zygote's stack
        if keep_stderr:
            traceback.print_exc()
    hygiene.die()
