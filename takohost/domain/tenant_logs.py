"""Limits of tenant log capture, shared by the sandbox child and the host (pure; docs/spec/host-features.md#hf-observability).

Tenant code (``run``, effects, ``scheduled``, module import) writes to ``sys.stdout``,
``sys.stderr``, file descriptors 1 and 2, or through ``logging`` (which, unconfigured, writes
WARNING and above to ``sys.stderr``). The child cuts that output into lines and sends them to the
host in ``log`` frames (PROTOCOL.md "Logs"); the host tags each line with the instance, context
(epoch), step and attempt it knows are running, and stores it. Both sides apply the same limits,
because the child is untrusted (a forged ``log`` frame is held to the host's own budget):

* one line is at most :data:`MAX_LINE_CHARS` characters; a longer one is cut and says how many
  characters were cut (:func:`clip_line`);
* one context (one child) may log a burst of :data:`BURST_LINES` lines / :data:`BURST_CHARS`
  characters, refilled at :data:`RATE_LINES` lines / :data:`RATE_CHARS` characters per second
  (:class:`Budget`, a token bucket; time in seconds); lines over it are dropped and counted, and
  the count is stored as one visible "N lines dropped" line;
* one instance (or one cron delivery) keeps at most :data:`MAX_STORED_LINES` lines: the oldest give
  way, and the listing says how many were removed.
"""

from __future__ import annotations

__all__ = [
    "BURST_CHARS",
    "BURST_LINES",
    "FRAME_LINES",
    "HOST_STREAM",
    "MAX_LINE_CHARS",
    "MAX_STORED_LINES",
    "RATE_CHARS",
    "RATE_LINES",
    "STREAMS",
    "TENANT_STREAMS",
    "Budget",
    "clip_line",
    "dropped_text",
]

#: Longest stored line, in characters (longer lines are cut, the cut is said).
MAX_LINE_CHARS = 4096
#: Token bucket of one context: a burst of this many lines …
BURST_LINES = 2000
#: … refilled at this many lines per second.
RATE_LINES = 200
#: The same bucket in characters: a burst of 1 MiB of text …
BURST_CHARS = 1 << 20
#: … refilled at 64 Ki characters per second.
RATE_CHARS = 64 << 10
#: Lines one ``log`` frame carries at most.
FRAME_LINES = 256
#: Lines kept per instance and per cron delivery; the oldest give way.
MAX_STORED_LINES = 10_000

#: Streams a tenant line may come from.
TENANT_STREAMS = ("stdout", "stderr")
#: Lines the host writes itself (dropped-lines markers, failures with their traceback, replay
#: diagnostics): tenant code can never produce a line of this stream.
HOST_STREAM = "host"
STREAMS = (*TENANT_STREAMS, HOST_STREAM)


class Budget:
    """A token bucket over lines and characters; ``now`` is a monotonic time in seconds.

    ``take(chars, now)`` → True (the line is kept, its tokens spent) or False (dropped). Both
    buckets start full at ``now``. Pure: the caller passes the clock.
    """

    def __init__(
        self,
        *,
        now: float,
        burst_lines: int = BURST_LINES,
        rate_lines: float = RATE_LINES,
        burst_chars: int = BURST_CHARS,
        rate_chars: float = RATE_CHARS,
    ) -> None:
        self._burst = (float(burst_lines), float(burst_chars))
        self._rate = (float(rate_lines), float(rate_chars))
        self._lines = float(burst_lines)
        self._chars = float(burst_chars)
        self._at = now

    def take(self, chars: int, now: float) -> bool:
        """Spend one line and ``chars`` characters if both buckets hold them."""
        elapsed = max(0.0, now - self._at)
        self._at = max(self._at, now)
        self._lines = min(self._burst[0], self._lines + elapsed * self._rate[0])
        self._chars = min(self._burst[1], self._chars + elapsed * self._rate[1])
        if self._lines < 1 or self._chars < chars:
            return False
        self._lines -= 1
        self._chars -= chars
        return True


def clip_line(text: str) -> str:
    """``text`` cut to :data:`MAX_LINE_CHARS` characters, saying how many were cut; NUL (which
    Postgres text cannot hold) becomes U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if len(text) <= MAX_LINE_CHARS:
        return text
    keep = MAX_LINE_CHARS - 40  # the marker is at most 40 characters
    return text[:keep] + f" … [{len(text) - keep} characters cut]"


def dropped_text(count: int, *, by: str) -> str:
    """The visible marker of ``count`` lines dropped over the rate limit (``by``: child or host)."""
    noun = "line" if count == 1 else "lines"
    return (
        f"{count} {noun} dropped: over the log limit of one context ({BURST_LINES} lines or "
        f"{BURST_CHARS} characters at once, then {RATE_LINES} lines / {RATE_CHARS} characters per s; "
        f"counted by the {by})"
    )
