"""A hint of non-determinism: does this context's replay follow the recorded steps? (pure;
docs/spec/host-features.md#hf-observability).

docs/spec/durable-workflow.md#dw-replay asks code outside steps, module import and the constructor included,
to be deterministic against the history, so every context asks for the recorded step names again, in the order
they were first recorded, before it asks for a new one. When it does not — a recorded step is skipped (a new
name is asked while recorded names were not replayed, or ``run`` ends without them), or a recorded step is
first asked after a step recorded later — the host says so in the history (``ReplayDiverged``) and the logs.
It is a diagnostic only: the spec's semantics (docs/spec/durable-workflow.md#dw-step: a completed name replays
its record, a new name runs) do not change. A name asked again after its first visit in the same context is
fine (deterministic code may reuse a completed name).

:class:`ReplayOrder` reports each kind of divergence once per context.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Divergence", "ReplayOrder"]

#: Step names listed in one diagnostic at most.
MAX_NAMES = 10


@dataclasses.dataclass(frozen=True)
class Divergence:
    """``kind``: ``"skipped"`` or ``"out_of_order"``; ``step``: the name asked when it was seen
    (``None`` at the end of ``run``); ``names``: the recorded names concerned (at most
    ``MAX_NAMES``; ``count`` says how many there were); ``message``: the sentence for humans."""

    kind: str
    step: str | None
    names: tuple[str, ...]
    count: int
    message: str

    def attributes(self) -> dict:
        """The ``ReplayDiverged`` history attributes."""
        attributes: dict = {"kind": self.kind, "names": list(self.names), "count": self.count}
        if self.step is not None:
            attributes["name"] = self.step
        attributes["message"] = self.message
        return attributes


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:MAX_NAMES])
    return shown + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")


class ReplayOrder:
    """Tracks one context's step requests against ``recorded`` (the instance's step names in the
    order they were first recorded)."""

    def __init__(self, recorded: list[str]) -> None:
        self._index = {name: i for i, name in enumerate(recorded)}
        self._recorded = list(recorded)
        self._visited: set[str] = set()
        self._highest = -1  # index of the latest-recorded step visited so far
        self._reported: set[str] = set()
        #: Recorded names not asked for yet in this context (0: every name not recorded is new).
        self.unvisited = len(self._index)

    def visit(self, name: str) -> Divergence | None:
        """A step request for ``name``; the divergence it reveals (first of its kind), or ``None``."""
        if name in self._visited:
            return None
        self._visited.add(name)
        index = self._index.get(name)
        if index is not None:
            self.unvisited -= 1
        if index is None:  # a new step: every recorded step should have been replayed first
            return self._skipped(name, len(self._recorded))
        if index < self._highest:
            return self._report(
                "out_of_order",
                name,
                [self._recorded[self._highest]],
                f"replay asked for the recorded step {name!r} after {self._recorded[self._highest]!r}, "
                "which was recorded later: the code outside steps is not deterministic (or the "
                "Version changed the order of its steps)",
            )
        self._highest = index
        return self._skipped(name, index)

    def at_end(self) -> Divergence | None:
        """``run`` ended: recorded steps it never asked for were skipped."""
        return self._skipped(None, len(self._recorded))

    def _skipped(self, name: str | None, before: int) -> Divergence | None:
        missed = [n for n in self._recorded[:before] if n not in self._visited]
        if not missed:
            return None
        where = "before asking for the new step " + repr(name) if name is not None else "before run ended"
        if name is not None and name in self._index:
            where = f"before asking for the recorded step {name!r}"
        return self._report(
            "skipped",
            name,
            missed,
            f"replay skipped {len(missed)} recorded step(s) ({_names(missed)}) {where}: the code "
            "outside steps is not deterministic (random or time-based step names, or a changed "
            "Version); a new name runs its effect again",
        )

    def _report(self, kind: str, name: str | None, names: list[str], message: str) -> Divergence | None:
        if kind in self._reported:
            return None
        self._reported.add(kind)
        return Divergence(
            kind=kind, step=name, names=tuple(names[:MAX_NAMES]), count=len(names), message=message
        )
