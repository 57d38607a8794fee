"""Pure parts of tenant logs, tracebacks and the replay-order hint (docs/spec/host-features.md#hf-observability)."""

from __future__ import annotations

from takohost.domain import replay_order, tenant_logs
from takohost.runtime import capture, tracebacks


def test_budget_bursts_then_refills_at_its_rate():
    budget = tenant_logs.Budget(now=0.0, burst_lines=3, rate_lines=2, burst_chars=100, rate_chars=100)
    assert [budget.take(1, 0.0) for _ in range(4)] == [True, True, True, False]
    assert budget.take(1, 0.5) is True and budget.take(1, 0.5) is False  # 0.5 s x 2 lines/s = 1
    assert budget.take(1, 100.0) and budget.take(1, 100.0) and budget.take(1, 100.0)  # capped at the burst
    assert not budget.take(1, 100.0)
    chars = tenant_logs.Budget(now=0.0, burst_lines=10, rate_lines=1, burst_chars=10, rate_chars=1)
    assert chars.take(8, 0.0) and not chars.take(8, 0.0)  # characters run out before lines


def test_clip_line_cuts_and_says_so():
    assert tenant_logs.clip_line("a\x00b") == "a\ufffdb"
    long = "x" * (tenant_logs.MAX_LINE_CHARS + 500)
    cut = tenant_logs.clip_line(long)
    assert len(cut) <= tenant_logs.MAX_LINE_CHARS and cut.endswith(" characters cut]")
    kept = len(cut) - len(cut[cut.index(" … [") :])
    assert f"[{len(long) - kept} characters cut]" in cut


def test_splitter_joins_pieces_and_bounds_a_partial_line():
    got: list[str] = []
    splitter = capture._Splitter(got.extend)
    for piece in ("a", "b", "\nc\n\nd", "e"):
        splitter.feed(piece)
    assert got == ["ab", "c", ""]
    splitter.feed("x" * (tenant_logs.MAX_LINE_CHARS * 3))
    splitter.end()
    assert got[3] == "de" + "x" * (tenant_logs.MAX_LINE_CHARS - 42) + f" … [{tenant_logs.MAX_LINE_CHARS * 3 + 2 - (tenant_logs.MAX_LINE_CHARS - 40)} characters cut]"


def test_sink_sends_frames_of_at_most_frame_lines_and_counts_drops():
    frames: list[dict] = []
    now = [0.0]
    sink = capture.Sink(frames.append, clock=lambda: now[0], wall=lambda: 1.5)
    sink.lines("stdout", [f"l{i}" for i in range(tenant_logs.BURST_LINES + 10)])
    sink.flush()
    assert all(len(f["lines"]) <= tenant_logs.FRAME_LINES for f in frames)
    assert sum(len(f["lines"]) for f in frames) == tenant_logs.BURST_LINES
    assert sum(f["dropped"] for f in frames) == 10
    assert frames[0]["lines"][0] == [1500, "stdout", "l0"]


def test_a_muted_sink_sends_nothing_and_its_budget_starts_when_armed():
    # Installed while the child waits for its job: muted, then armed as the job arrives. The
    # budget must start at arm (after the host's), never earlier.
    frames: list[dict] = []
    now = [0.0]
    sink = capture.Sink(None, clock=lambda: now[0], wall=lambda: 1.5)
    sink.lines("stdout", ["before the job"])
    sink.flush()
    assert frames == []
    now[0] = 3600.0  # an hour idle earns nothing beyond the burst
    sink.arm(frames.append)
    sink.lines("stdout", [f"l{i}" for i in range(tenant_logs.BURST_LINES + 5)])
    sink.flush()
    assert sum(len(f["lines"]) for f in frames) == tenant_logs.BURST_LINES
    assert sum(f["dropped"] for f in frames) == 5
    assert frames[0]["lines"][0] == [1500, "stdout", "l0"]


def test_clean_frames_accepts_only_the_frame_shape():
    frame = {"module": "main", "file": "main.py", "line": 3, "function": "run", "source": "x = 1"}
    assert tracebacks.clean_frames([frame]) == [frame]
    assert tracebacks.clean_frames([{**frame, "extra": 1}]) is None
    assert tracebacks.clean_frames([{**frame, "line": True}]) is None
    assert tracebacks.clean_frames([{**frame, "line": -1}]) is None
    assert tracebacks.clean_frames("no") is None
    assert tracebacks.clean_frames([frame] * (tracebacks.MAX_FRAMES + 1)) is None
    long = tracebacks.clean_frames([{**frame, "source": "s" * 5000, "function": "\ud800"}])
    assert len(long[0]["source"]) == 300 and long[0]["function"] == "?"
    assert tracebacks.location([frame]) == "main.py, line 3"
    assert tracebacks.format_frames([frame]) == '  File "main.py", line 3, in run\n    x = 1'


def test_tenant_frames_keep_only_the_versions_modules():
    source = "def inner():\n    raise KeyError('k')\ndef outer():\n    inner()\n"
    namespace: dict = {}
    exec(compile(source, "/takohost/version/pkg/util.py", "exec"), namespace)  # noqa: S102
    try:
        namespace["outer"]()
    except KeyError as exc:
        frames = tracebacks.tenant_frames(exc)
    assert [(f["module"], f["file"], f["line"], f["function"]) for f in frames] == [
        ("pkg.util", "pkg/util.py", 4, "outer"),
        ("pkg.util", "pkg/util.py", 2, "inner"),
    ]  # this test's own frame (not a Version module) is trimmed
    try:
        compile("x = (\n", "/takohost/version/main.py", "exec")
    except SyntaxError as exc:
        assert tracebacks.location(tracebacks.tenant_frames(exc)) == "main.py, line 1"


def test_replay_order_in_order_and_reused_names_are_quiet():
    order = replay_order.ReplayOrder(["a", "b", "c"])
    assert [order.visit(n) for n in ("a", "b", "a", "c", "new")] == [None] * 5
    assert order.at_end() is None


def test_replay_order_reports_a_skip_once_and_out_of_order():
    order = replay_order.ReplayOrder(["a", "b", "c"])
    assert order.visit("a") is None
    skipped = order.visit("c")
    assert skipped is not None and skipped.kind == "skipped" and skipped.names == ("b",)
    late = order.visit("b")
    assert late is not None and late.kind == "out_of_order" and late.names == ("c",)
    assert order.visit("new") is None  # each kind once per context
    fresh = replay_order.ReplayOrder(["roll 0.1", "nap"])
    diverged = fresh.visit("roll 0.7")
    assert diverged.kind == "skipped" and diverged.count == 2 and diverged.attributes()["name"] == "roll 0.7"
    ended = replay_order.ReplayOrder(["a", "b"])
    ended.visit("a")
    assert ended.at_end().names == ("b",)


def test_replay_order_counts_the_recorded_names_not_asked_for_yet():
    # The eager grant waits for 0: only then is every name the child has not asked for new.
    order = replay_order.ReplayOrder(["a", "b"])
    assert order.unvisited == 2
    order.visit("a")
    order.visit("a")  # asked again: counted once
    order.visit("new")  # a new name (a divergence) does not count
    assert order.unvisited == 1
    order.visit("b")
    assert order.unvisited == 0
    assert replay_order.ReplayOrder([]).unvisited == 0
