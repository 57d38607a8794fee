"""The golden instances (tests/golden/README.md): each a workflow directory, a class, params and
the actions that drive it — recorded once from the real engine by ``scripts/record_golden_histories.py``
(``tests/golden/record.py``) into ``tests/golden/<name>.json``, and replayed in the unit tier by
``tests/unit/test_golden_histories.py``.

Actions: ``["advance", seconds]`` moves the clock and fires the timers then due (timers fall due
exactly on these instants, so the engine and the test kit run each context at the same time);
``["send", type, payload]`` sends an event. Params may name ``{tmp}``: a directory of the run.
"""

from __future__ import annotations

import datetime as dt
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parent
#: The recording's clock starts here (``takohost.testing.DEFAULT_START``): timestamps reproduce.
START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

SCENARIOS: dict[str, dict] = {
    "steps": {
        "dir": "tests/golden/workflows/steps",
        "className": "Steps",
        "params": {"numbers": [1, 2, 3]},
        "actions": [["advance", 60], ["send", "approve", {"by": "ada"}], ["advance", 30]],
        "replay": {"ok": True},
    },
    "retries": {
        "dir": "tests/golden/workflows/retries",
        "className": "Retries",
        "params": {"counter": "{tmp}/counter"},
        "actions": [["advance", 5], ["advance", 10]],
        "replay": {"ok": True},
    },
    "failure": {
        "dir": "tests/golden/workflows/failure",
        "className": "Failure",
        "params": None,
        "actions": [],
        "replay": {"ok": True},
    },
    "divergence": {
        "dir": "tests/golden/workflows/divergence",
        "className": "Divergence",
        "params": None,
        "actions": [["advance", 10]],
        "replay": {"ok": False, "index": 1},
    },
    "asyncflow": {
        "dir": "tests/golden/workflows/asyncflow",
        "className": "AsyncFlow",
        "params": None,
        "actions": [["advance", 5], ["send", "go", {"x": 1}]],
        "replay": {"ok": True},
    },
    "orders": {
        "dir": "examples/orders",
        "className": "OrderWorkflow",
        "params": {
            "orderId": "A-1001",
            "customer": "ada@example.com",
            "paymentMethod": "pm_card_ok",
            "items": [{"sku": "TEA-01", "qty": 2, "unitPrice": 1250}],
        },
        "actions": [["send", "shipped", {"carrier": "DHL", "trackingNumber": "00340434161094042557"}]],
        "replay": {"ok": True},
        # The effect stamps the wall clock into its result (and the output): not compared.
        "wallClockResults": ["record completion"],
    },
}


def params_for(name: str, tmp: pathlib.Path) -> dict | None:
    """The scenario's params with ``{tmp}`` filled in."""
    params = SCENARIOS[name]["params"]
    if params is None:
        return None
    return {k: v.replace("{tmp}", str(tmp)) if isinstance(v, str) else v for k, v in params.items()}


def golden_path(name: str) -> pathlib.Path:
    """Where the recorded history of scenario ``name`` is kept."""
    return GOLDEN / f"{name}.json"


def normalised(events: list[dict], *, wall_clock_results: tuple[str, ...] = ()) -> list[dict]:
    """``events`` without what names the recording rather than the semantics (the Version's uid),
    depends on where it ran (a path in params) or on the wall clock (the results of the steps
    ``wall_clock_results``)."""
    out = []
    for event in events:
        attributes = dict(event["attributes"])
        if event["eventType"] == "StepCompleted" and attributes.get("name") in wall_clock_results:
            attributes.pop("result", None)
        if event["eventType"] == "ContextStarted":
            attributes.pop("versionUid", None)
        if event["eventType"] == "InstanceCreated":
            attributes.pop("params", None)
        out.append({**event, "attributes": attributes})
    return out
