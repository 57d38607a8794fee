"""How the console's log panels write one line (``host_api.ui.logs.line_text``)."""

from __future__ import annotations

from host_api.ui import logs


def test_a_line_names_its_step_attempt_stream_and_a_replay():
    line = {"time": "2026-12-03T22:00:00.000Z", "epoch": 2, "step": "charge", "attempt": 2, "stream": "stderr",
            "message": "boom", "replayed": False}
    assert logs.line_text(line) == "2026-12-03T22:00:00.000Z [charge #2] stderr: boom"
    again = {**line, "step": None, "attempt": None, "stream": "stdout", "message": "starting", "replayed": True}
    assert logs.line_text(again) == "2026-12-03T22:00:00.000Z (replay) starting"
    run = {"time": "2026-12-03T22:00:00.000Z", "delivery": 2, "stream": "host", "message": "redelivered"}
    assert logs.line_text(run) == "2026-12-03T22:00:00.000Z delivery 2 host: redelivered"
