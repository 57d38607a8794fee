"""The test kit's child: the sandbox child's own run driver (``child.jobs.run_workflow``, the SDK's
``step``, ``env`` and bindings) on a thread of the test process, talking to the in-process parent
over queues instead of a socket.

Every frame goes through the wire encoding (``protocol.encode_frame`` and back), so the parent
sees what it would over the socket and neither side keeps a reference to the other's objects.

Stopping a context is what the sandbox does, as far as a thread allows: the thread is never
resumed. A child whose context ends (a sleep, a wait, a retry, the end of ``run``) is *parked*
on its pending request for good, so not one more line of its code runs — no ``finally:``, no
``except``: docs/spec/durable-workflow.md#dw-stop "sleeping/waiting/terminalを公開する前にHostはコード停止を確認し". Parked
threads are daemon threads and are reclaimed when the test process exits.

Module state is fresh in every context (docs/spec/worker-forms.md#wf-loading): a Version directory's modules are
imported from memory by the sandbox's own importer (``child.importer.SourceModules``); a class's
module is executed again from its spec into a new module object.
"""

from __future__ import annotations

import importlib.util
import linecache
import queue
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, NoReturn

from takohost.runtime import protocol
from takohost.runtime.child import importer, jobs

__all__ = ["ChildThread", "ClassLoader", "DirectoryLoader", "Loader"]

_KILL = object()
_FOREVER = threading.Event()  # never set: a parked child waits on it


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as the other side would read it from the socket."""
    return protocol.FrameBuffer().feed(protocol.encode_frame(message))[0]


class _Channel:
    """``step.Channel`` and ``bindings.Requester`` for a child on a thread."""

    def __init__(self) -> None:
        self.to_parent: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.to_child: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.killed = False

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; return the parent's answer (a killed child parks here for good)."""
        self.send(message)
        reply = self.to_child.get()
        if reply is _KILL:
            _park()
        assert isinstance(reply, dict)
        return reply

    def send(self, message: dict[str, Any]) -> None:
        """Send ``message`` without waiting for an answer."""
        if self.killed:
            _park()
        self.to_parent.put(_wire(message))

    def final(self, message: dict[str, Any]) -> NoReturn:
        """Send the last message, then stop (the sandbox child kills its process group)."""
        self.send(message)
        _park()

    def fatal(self, message: str) -> NoReturn:
        """The parent broke the protocol (never, in process): report it and stop."""
        self.to_parent.put({"op": "_fatal", "message": message})
        _park()


def _park() -> NoReturn:
    _FOREVER.wait()
    raise AssertionError("unreachable")


class Loader:
    """Imports a workflow's main module fresh for one context (see the subclasses)."""

    def load(self) -> Any:
        """A fresh main module (raises what importing it raises)."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Undo what :meth:`load` did to the import system (after the context ended)."""


class DirectoryLoader(Loader):
    """A Version's ``modules`` (path → source) served from memory, ``main`` imported fresh: the
    sandbox's importer. The test process's ``sys.modules`` entries of the same names are put back
    after each context."""

    def __init__(self, modules: dict[str, str], main: str) -> None:
        self.job = {"modules": dict(modules), "mainModule": main}
        self._tops = {importer.SourceModules.module_name(path).split(".")[0] for path in modules}
        self._saved: dict[str, types.ModuleType] | None = None

    def _ours(self, name: str) -> bool:
        return name.split(".")[0] in self._tops

    def load(self) -> Any:
        """Install the Version's finder and import its main module (``importer.import_version``)."""
        if self._saved is None:
            self._saved = {name: module for name, module in sys.modules.items() if self._ours(name)}
        _forget_virtual_lines()
        module, _ = importer.import_version(self.job)
        return module

    def cleanup(self) -> None:
        """Remove the Version's finders and modules; restore the test process's own."""
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, importer.SourceModules)]
        for name in [name for name in sys.modules if self._ours(name)]:
            del sys.modules[name]
        if self._saved is not None:
            sys.modules.update(self._saved)
            self._saved = None
        _forget_virtual_lines()


def _forget_virtual_lines() -> None:
    """Drop ``linecache``'s lines of Version files: every Version's files share the virtual paths
    (``/takohost/version/main.py``), so another workflow's, or an older context's, must not be
    shown in a traceback (a sandbox child starts with an empty cache)."""
    for filename in [f for f in linecache.cache if isinstance(f, str) and f.startswith(importer.VIRTUAL_ROOT + "/")]:
        del linecache.cache[filename]


class ClassLoader(Loader):
    """A workflow class's module executed again from its import spec into a new module object
    (never put in ``sys.modules``), so module-level state starts over in every context. A class
    whose module cannot be executed again (defined inside a function, in ``__main__`` or a
    module without a spec) runs as it is, without fresh module state."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.fresh = False
        module = sys.modules.get(cls.__module__)
        spec = getattr(module, "__spec__", None)
        if (
            "<locals>" not in cls.__qualname__
            and "." not in cls.__qualname__
            and cls.__module__ != "__main__"
            and spec is not None
            and spec.loader is not None
            and getattr(module, cls.__name__, None) is cls
        ):
            self.spec = spec
            self.fresh = True

    def load(self) -> Any:
        """A new module object of the class's module (or a namespace holding the class itself)."""
        if not self.fresh:
            return types.SimpleNamespace(**{self.cls.__name__: self.cls})
        module = importlib.util.module_from_spec(self.spec)
        assert self.spec.loader is not None
        self.spec.loader.exec_module(module)
        return module


class ChildThread:
    """One context's child: ``run_workflow`` of ``job`` on a daemon thread (see the module doc)."""

    def __init__(self, *, loader: Loader, job: dict[str, Any], timeout: float) -> None:
        self.channel = _Channel()
        self.timeout = timeout
        self.thread = threading.Thread(
            target=self._main, args=(loader.load, job), name="takohost-testing-child", daemon=True
        )
        self.thread.start()

    def _main(self, load: Callable[[], Any], job: dict[str, Any]) -> None:
        try:
            module = load()
        except BaseException as exc:  # noqa: BLE001 - an import error ends the run, as in the sandbox
            jobs.import_failed(self.channel, exc)
        jobs.run_workflow(module, job, self.channel)

    def recv(self) -> dict[str, Any]:
        """The child's next message. Raises ``TimeoutError`` when its code runs longer than the
        kit's ``timeout`` without a message (a never-ending loop: the thread cannot be stopped)."""
        try:
            return self.channel.to_parent.get(timeout=self.timeout)
        except queue.Empty:
            raise TimeoutError(
                f"the workflow code sent no step request or result within {self.timeout} s"
            ) from None

    def answer(self, message: dict[str, Any]) -> None:
        """Answer the child's pending request."""
        self.channel.to_child.put(_wire(message))

    def kill(self) -> None:
        """Stop the child: it is parked on its pending request and never runs again."""
        self.channel.killed = True
        self.channel.to_child.put(_KILL)
