"""takohost.testing.replay (docs/spec/host-features.md#hf-testing): a recorded history replayed against candidate code
reports the first divergence — step index, expected and found name/kind/settings — or success."""

from __future__ import annotations

import json

import pytest

from takohost import testing

FLOW = '''
from takohost import WaitTimeout


class Flow:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        a = step.do("fetch", lambda: {"n": event["params"]["n"]}, {"maxAttempts": 3})
        step.sleep("cool", 60)
        try:
            got = step.wait_for_event("approve", {"type": "ok", "timeoutSeconds": 600})
        except WaitTimeout:
            got = None
        return {"a": a, "got": got}
'''
TOML = '[worker]\nname = "flow"\n\n[[workflows]]\nname = "flow-run"\nclass = "Flow"\n'


def project(tmp_path, source: str, name: str = "candidate"):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "main.py").write_text(source)
    (directory / "takohost.toml").write_text(TOML)
    return directory


@pytest.fixture
def waiting(tmp_path):
    """The history of an instance waiting in 'approve', exported to a file."""
    inst = testing.start(project(tmp_path, FLOW, "recorded"), params={"n": 7}, auto=False)
    inst.run(until_waiting=True)
    assert inst.status == "waiting"
    path = tmp_path / "waiting.json"
    path.write_text(json.dumps(testing.HistoryFile.of_instance(inst).to_json()))
    return path


def test_the_same_code_replays_and_stops_at_the_first_step_without_a_result(tmp_path, waiting):
    result = testing.replay(project(tmp_path, FLOW), waiting)
    assert result and result.replayed == 2 and result.stopped_at == "approve"
    assert result.message == "compatible: 2 recorded step(s) replayed; stopped at 'approve', the first step without a recorded result"


def test_a_step_added_after_the_last_recorded_one_is_compatible(tmp_path, waiting):
    added = FLOW.replace('        return {"a": a', '        step.do("extra", lambda: {})\n        return {"a": a')
    assert testing.replay(project(tmp_path, added), waiting).ok


def test_a_renamed_step_diverges_at_its_index(tmp_path, waiting):
    result = testing.replay(project(tmp_path, FLOW.replace('"fetch"', '"load"')), waiting)
    assert not result
    d = result.divergence
    assert d.index == 1 and d.expected["name"] == "fetch" and d.found["name"] == "load"
    assert d.expected["kind"] == d.found["kind"] == "do"


def test_reordered_steps_diverge(tmp_path, waiting):
    swapped = FLOW.replace(
        '        a = step.do("fetch", lambda: {"n": event["params"]["n"]}, {"maxAttempts": 3})\n        step.sleep("cool", 60)\n',
        '        step.sleep("cool", 60)\n        a = step.do("fetch", lambda: {"n": event["params"]["n"]}, {"maxAttempts": 3})\n',
    )
    d = testing.replay(project(tmp_path, swapped), waiting).divergence
    assert (d.index, d.expected["name"], d.found["name"], d.found["kind"]) == (1, "fetch", "cool", "sleep")


def test_a_changed_kind_diverges(tmp_path, waiting):
    changed = FLOW.replace('step.sleep("cool", 60)', 'step.do("cool", lambda: {})')
    d = testing.replay(project(tmp_path, changed), waiting).divergence
    assert (d.index, d.expected["kind"], d.found["kind"]) == (2, "sleep", "do")
    assert "recorded as a sleep step" in d.message


def test_changed_settings_diverge_for_an_unfinished_step_only(tmp_path, waiting):
    unfinished = FLOW.replace('"timeoutSeconds": 600', '"timeoutSeconds": 900')
    d = testing.replay(project(tmp_path, unfinished), waiting).divergence
    assert d.index == 3 and d.expected["settings"] == {"type": "ok", "timeoutSeconds": 600}
    assert d.found["settings"] == {"type": "ok", "timeoutSeconds": 900}
    # A completed step replays its record whatever its other arguments are (docs/spec/durable-workflow.md).
    finished = FLOW.replace('{"maxAttempts": 3}', '{"maxAttempts": 5}').replace('"cool", 60', '"cool", 61')
    assert testing.replay(project(tmp_path, finished, "finished"), waiting).ok


def test_a_run_that_ends_before_a_recorded_step_or_with_another_output_diverges(tmp_path):
    inst = testing.start(project(tmp_path, FLOW, "recorded"), params={"n": 7})
    assert inst.output == {"a": {"n": 7}, "got": None}
    recorded = testing.HistoryFile.of_instance(inst)
    assert testing.replay(project(tmp_path, FLOW, "same"), recorded).ok
    early = FLOW.replace('        step.sleep("cool", 60)\n', '        return {"early": True}\n')
    d = testing.replay(project(tmp_path, early, "early"), recorded).divergence
    assert d.index == 2 and d.expected["name"] == "cool" and d.found is None
    other = FLOW.replace('return {"a": a, "got": got}', 'return {"a": a, "got": got, "v": 2}')
    d = testing.replay(project(tmp_path, other, "other"), recorded).divergence
    assert d.index == 4 and "the history recorded" in d.message


def test_a_file_that_is_not_a_history_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"events": []}')
    with pytest.raises(ValueError):
        testing.load_history(path)
