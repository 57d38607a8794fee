"""The ``outbound`` network rules (``isolation.landlock``): a kernel without the needed ABI is
refused with the reason (the rules themselves are tested on real sandboxes in
``tests/integration/test_sandbox_network.py``)."""

from __future__ import annotations

import pytest

from takohost.runtime.isolation import landlock, syscalls


def test_the_abi_is_a_version_number():
    assert isinstance(landlock.abi(), int) and landlock.abi() >= 0


def test_a_kernel_without_landlock_network_rules_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(landlock, "abi", lambda: 5)
    with pytest.raises(syscalls.IsolationUnavailable, match=r"needs Landlock ABI 6 \(Linux 6.12\); this kernel has 5"):
        landlock.restrict_network((443,))
