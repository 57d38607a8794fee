"""Sandbox children for replay contexts: one pre-spawned ("warm") child per process (docs/performance.md:
keep the fork off the critical path).

A warm child is forked and has said hello while no context waits for it; it holds no tenant data
until it gets its job, and without one it dies after the runtime's job timeout (or with its
channel). :func:`prespawn` starts one in a background thread after each context; :func:`take_child`
hands it the next job, or spawns synchronously when there is none.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time

from workers.sandbox.child import ChildGone, ChildHandle
from workers.sandbox.zygote import Zygote

log = logging.getLogger(__name__)

#: A warm child older than this is replaced, well before the runtime's 60 s job timeout could
#: make it die just as its job arrives (which would look like a crash of the workflow's code).
WARM_MAX_AGE_SECONDS = 20.0

# (pid, id(zygote)) → Future of (warm child, monotonic spawn time); a Future while still spawning.
_warm: dict[tuple[int, int], concurrent.futures.Future] = {}
_warm_lock = threading.Lock()


def take_child(zygote: Zygote, job: dict, *, space: str | None = None) -> ChildHandle:
    """A child running ``job`` for code of ``space`` (its egress rules,
    ``ChildHandle.send_job``): the warm one if it is (or is about to be) alive, else a
    new one."""
    with _warm_lock:
        pending = _warm.pop((os.getpid(), id(zygote)), None)
    handle = None
    fresh = False
    if pending is not None:
        try:
            handle, spawned_at = pending.result(timeout=5.0)
            fresh = time.monotonic() - spawned_at < WARM_MAX_AGE_SECONDS
        except Exception:  # noqa: BLE001 - the pre-spawn failed: spawn now
            handle = None
    if handle is not None:
        if fresh and not handle.exited:
            try:
                handle.send_job(job, space=space)
                return handle
            except ChildGone:
                pass
        handle.kill_and_wait()
        handle.close()
    return zygote.spawn(job, space=space)


def prespawn(zygote: Zygote) -> None:
    """Start spawning a warm child for the next context of this process (background thread)."""
    key = (os.getpid(), id(zygote))
    future: concurrent.futures.Future = concurrent.futures.Future()
    with _warm_lock:
        if key in _warm:
            return
        _warm[key] = future

    def work() -> None:
        try:
            future.set_result((zygote.spawn(None), time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - the next context spawns synchronously instead
            log.debug("pre-spawn failed", exc_info=True)
            future.set_exception(exc)

    threading.Thread(target=work, name="takohost-prespawn", daemon=True).start()
