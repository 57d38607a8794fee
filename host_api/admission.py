"""Admission of large request bodies: a Space cannot take the API from everyone else.

Parsing, measuring and canonicalising a body costs CPU in proportion to its size (and several
times more when it nests deeply: about 3 s for the deepest 1 MiB document, docs/spec/host-limits.md#hl-decisions "Document
depth"), all inside one API thread that holds the GIL for most of it. So each API process works on
at most ``TAKOHOST_API_LARGE_BODIES`` (default 1) bodies over ``LARGE_BODY_BYTES`` at once; one more
is answered at once with ``503 backend_unavailable`` and ``Retry-After: 1`` (nothing is read,
parsed or written), and the process's other threads stay free for ordinary requests. Bodies of
ordinary size are never held back.

:func:`admit` is called by ``host_api.body.raw_body`` once the body has been read (so a slow
sender holds a thread, never a slot); :func:`release` runs at the end of every request
(``teardown_request``).
"""

from __future__ import annotations

import os
import threading

import flask

from host_api.errors import ApiError

#: A body over this many bytes is "large" (256 KiB: far above any ordinary params, event or
#: resource document; a WorkerVersion with its sources can be larger).
LARGE_BODY_BYTES = 256 * 1024
#: Seconds a refused client is asked to wait before sending again.
RETRY_AFTER_S = 1

_G_KEY = "_takohost_large_body"
_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def large_bodies_at_once() -> int:
    """``TAKOHOST_API_LARGE_BODIES``: large bodies one API process works on at once (≥ 1)."""
    raw = os.environ.get("TAKOHOST_API_LARGE_BODIES", "1")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def _semaphore() -> threading.BoundedSemaphore:
    global _slots
    if _slots is None:
        with _slots_lock:
            if _slots is None:
                _slots = threading.BoundedSemaphore(large_bodies_at_once())
    return _slots


def admit(size: int) -> None:
    """Let a body of ``size`` bytes in, or refuse it: a large body takes one of this process's
    slots until the request ends (:func:`release`).

    Raises:
        ApiError: ``backend_unavailable`` (503, ``Retry-After: 1``) when every slot is taken.
    """
    if size <= LARGE_BODY_BYTES or getattr(flask.g, _G_KEY, False):
        return
    if not _semaphore().acquire(blocking=False):
        raise ApiError(
            "backend_unavailable",
            f"this API process is already working on a request body over {LARGE_BODY_BYTES} bytes; "
            f"send it again in {RETRY_AFTER_S} s",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    setattr(flask.g, _G_KEY, True)


def release(_exc: BaseException | None = None) -> None:
    """``teardown_request``: give back the slot this request took, if any."""
    if getattr(flask.g, _G_KEY, False):
        setattr(flask.g, _G_KEY, False)
        _semaphore().release()
