"""Golden-history replay tests (docs/spec/host-features.md#hf-structure; Temporal's ``tests/worker/test_replayer.py``):
histories recorded once from the real engine (``scripts/record_golden_histories.py``) and kept in
``tests/golden/`` — every step kind, retries, timeouts, an uncaught step failure, an async run,
the README tour's order and a non-deterministic workflow — replayed here against the runtime.

Two checks per history, so that a change that alters replay fails in the unit tier first:

* replaying it against its workflow (``takohost.testing.replay``: the sandbox's run driver and
  SDK answered by the host's ``decide``) gives the recorded outcome, or the recorded divergence;
* running the same scenario in process (``takohost.testing``) writes the same history, event for
  event (timestamps included: both clocks start at ``scenarios.START``), as the engine did.
"""

from __future__ import annotations

import json

import pytest

from takohost import testing
from tests.golden import scenarios

NAMES = list(scenarios.SCENARIOS)


def _golden(name: str) -> dict:
    return json.loads(scenarios.golden_path(name).read_text())


@pytest.mark.parametrize("name", NAMES)
def test_the_recorded_history_replays_against_the_runtime(name):
    scenario = scenarios.SCENARIOS[name]
    result = testing.replay(scenarios.ROOT / scenario["dir"], _golden(name), class_name=scenario["className"])
    expected = scenario["replay"]
    assert result.ok is expected["ok"], result.message
    if result.ok:
        assert result.stopped_at is None and result.outcome == _golden(name)["status"]
    else:
        assert result.divergence.index == expected["index"]


def test_the_divergence_names_the_recorded_step_and_the_one_asked_for():
    recorded = _golden("divergence")
    first = next(e["attributes"]["name"] for e in recorded["events"] if e["eventType"] == "StepAttemptStarted")
    assert "ReplayDiverged" in [e["eventType"] for e in recorded["events"]]  # the engine saw it too
    d = testing.replay(scenarios.ROOT / scenarios.SCENARIOS["divergence"]["dir"], recorded).divergence
    assert d.expected["name"] == first and d.found["name"].startswith("pick ") and d.found["name"] != first


@pytest.mark.parametrize("name", [n for n in NAMES if n != "divergence"])
def test_the_test_kit_writes_the_engines_history(name, tmp_path):
    scenario = scenarios.SCENARIOS[name]
    inst = testing.start(
        scenarios.ROOT / scenario["dir"],
        params=scenarios.params_for(name, tmp_path),
        id=f"golden-{name}",
        class_name=scenario["className"],
        auto=False,
        now=scenarios.START,
    )
    for action in scenario["actions"]:
        if action[0] == "advance":
            inst.advance(action[1])
        else:
            inst.send_event(action[1], action[2])
    volatile = tuple(scenario.get("wallClockResults", ()))
    engine = scenarios.normalised(_golden(name)["events"], wall_clock_results=volatile)
    kit = scenarios.normalised(inst.history, wall_clock_results=volatile)
    assert kit == engine


def test_a_changed_workflow_fails_against_the_golden_history(tmp_path):
    """What the suite catches: the 'steps' workflow with one step renamed diverges at that step."""
    source = (scenarios.ROOT / scenarios.SCENARIOS["steps"]["dir"] / "main.py").read_text()
    changed = tmp_path / "steps"
    changed.mkdir()
    (changed / "main.py").write_text(source.replace('"pause"', '"rest"'))
    (changed / "takohost.toml").write_text((scenarios.ROOT / scenarios.SCENARIOS["steps"]["dir"] / "takohost.toml").read_text())
    d = testing.replay(changed, _golden("steps")).divergence
    assert (d.index, d.expected["name"], d.found["name"]) == (3, "pause", "rest")
