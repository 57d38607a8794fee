"""Which WorkerDeployments the server-side deploy gate covers (services.replay_checks.gate_applies,
``TAKOHOST_DEPLOY_REPLAY_GATE``; docs/testing.md)."""

from __future__ import annotations

import pytest

from services.replay_checks import gate_applies


@pytest.mark.parametrize("value", ["", "0", "false", "no", " "])
def test_off_values_gate_nothing(value: str) -> None:
    assert not gate_applies(value, space="acme", deployment="orders")


@pytest.mark.parametrize("value", ["1", "true", "yes", "*", "TRUE"])
def test_on_values_gate_every_deployment(value: str) -> None:
    assert gate_applies(value, space="acme", deployment="orders")


def test_a_list_gates_the_deployments_it_names_and_a_spaces_star() -> None:
    setting = "acme/orders, beta/*"
    assert gate_applies(setting, space="acme", deployment="orders")
    assert not gate_applies(setting, space="acme", deployment="billing")
    assert gate_applies(setting, space="beta", deployment="anything")
    assert not gate_applies(setting, space="gamma", deployment="orders")
    # A Space's name is not a prefix match, nor is a Deployment's.
    assert not gate_applies("acme/order", space="acme", deployment="orders")
    assert not gate_applies("acm/*", space="acme", deployment="orders")
