"""Fair share that holds on any fleet size by default (docs/spec/host-features.md#hf-neighbours; docs/spec/host-limits.md#hl-decisions
"Fair share and quotas"; README "Production", "Fair share").

A hostile tenant's attack, as it was run against ``takohost dev``: Space A's effects that never
return held both worker slots (the default cap, 8 contexts per Space, was above the fleet's 2
slots), so Space B's one-step instance never ran. Here on real API, worker and beat processes
with **default settings**: A runs 3 effects that never return and queues 1,000 more creates;
B's one-step instance must complete within 2 s — on ``takohost dev``'s worker (one ``takohost
worker --concurrency 2``) and on a fleet of 2 workers × 2 slots. The cap follows the slots the
live fleet registers (``services.fleet``).

And validation: A's 3 WorkerVersions whose import sleeps 9.5 s, then B's trivial Version, which
must validate within 2 s (before: about 28 s, first come first served across Spaces).

The scenarios are ``bench.fairness_bench``'s; their figures are printed (``-s``) as JSON lines.
"""

from __future__ import annotations

import json

import pytest

from bench import fairness_bench
from tests.support import workflows

BOUND_S = 2.0


@pytest.mark.parametrize(("workers", "concurrency"), [(1, 2), (2, 2)], ids=["dev-1x2", "fleet-2x2"])
def test_a_space_whose_effects_never_return_does_not_hold_every_slot(workers, concurrency):
    with workflows.private_stack(workers=workers, worker_pool="solo", worker_concurrency=concurrency) as stack:
        figures = fairness_bench.measure_slots(
            api_url=stack.api_url, db_url=stack.db_url, namespace=stack.namespace, hangers=3, flood=1000,
            give_up=30.0,
        )
    figures["fleet"] = f"{workers}x{concurrency}"
    print("fairness-slots " + json.dumps(figures))
    slots = workers * concurrency
    assert figures["victim_s"] is not None and figures["victim_s"] <= BOUND_S, figures
    assert figures["hanging_at_once"] == min(3, slots - 1), figures  # the cap is the live slots - 1


@pytest.mark.parametrize("slow_versions", [3, 5])
def test_a_space_s_slow_imports_do_not_delay_another_space_s_validation(slow_versions):
    """3: as in the field; 5: more than one Space may check at once in the validation process
    (``TAKOHOST_VALIDATION_CONCURRENCY`` 4, so 3): the others are deferred, and still succeed."""
    with workflows.private_stack(workers=1, worker_pool="solo", worker_concurrency=2) as stack:
        figures = fairness_bench.measure_validation(
            api_url=stack.api_url, db_url=stack.db_url, slow_versions=slow_versions
        )
    print("fairness-validation " + json.dumps(figures))
    assert figures["victim_s"] <= BOUND_S, figures
    assert figures["slow_states"] == ["succeeded"] * slow_versions, figures  # fair, and nothing lost
