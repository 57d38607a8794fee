"""The pure helpers of ``bench.template_bench``: the ratios it reports and its quantile."""

from __future__ import annotations

import pytest

from bench import template_bench


def test_ratio_rounds_and_refuses_a_zero_denominator():
    assert template_bench.ratio(5.59, 6.42) == 0.87
    assert template_bench.ratio(1.0, 0.0) is None
    assert template_bench.ratio(1.0, -2.0) is None


def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(1, 11)]
    assert template_bench.percentile(values, 0.5) in (5.0, 6.0)
    assert template_bench.percentile(values, 0.9) == 9.0
    assert template_bench.percentile(values, 1.0) == 10.0
    assert template_bench.percentile([3.0], 0.9) == 3.0
    with pytest.raises(ValueError):
        template_bench.percentile([], 0.5)


def test_the_template_keeps_every_denied_call_but_the_four_it_needs():
    from takohost.runtime import isolation

    for machine, calls in isolation.seccomp.DENIED_CALLS.items():
        kept = set(calls) - set(template_bench.TEMPLATE_ALLOWED)
        assert set(template_bench.TEMPLATE_ALLOWED) <= set(calls), machine
        assert {"bpf", "keyctl", "io_uring_setup", "open_tree", "fsopen", "ptrace"} <= kept


def test_the_template_filter_leaves_the_products_table_as_it_was():
    import platform

    from takohost.runtime import isolation

    if platform.machine() not in isolation.seccomp.DENIED_CALLS:
        pytest.skip("no filter for this machine")
    before = dict(isolation.seccomp.DENIED_CALLS[platform.machine()])
    packed = template_bench._template_filter(isolation).packed
    assert isolation.seccomp.DENIED_CALLS[platform.machine()] == before
    whole = isolation.seccomp.Filter(isolation.seccomp.program()).packed
    assert len(packed) == len(whole) - 8 * len(template_bench.TEMPLATE_ALLOWED)
