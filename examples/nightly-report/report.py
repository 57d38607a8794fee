"""The report's parts: collect, render, publish.

``collect`` stands in for your warehouse query; it derives stable sample numbers from the period
so that the example is deterministic and needs no database.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request


def collect(period):
    """Metrics for ``period`` ({"start", "end"} RFC 3339): {"orders", "revenueCents", "refunds"}."""
    seed = int(hashlib.sha256(period["start"].encode()).hexdigest()[:8], 16)
    orders = 100 + seed % 400
    return {"orders": orders, "revenueCents": orders * (1500 + seed % 1000), "refunds": seed % 7}


def render(period, metrics):
    """A short plain-text report."""
    revenue = metrics["revenueCents"] / 100
    return (
        f"Report {period['start']} .. {period['end']}\n"
        f"  orders:  {metrics['orders']}\n"
        f"  revenue: {revenue:,.2f}\n"
        f"  refunds: {metrics['refunds']}"
    )


def publish(webhook_url, period, text):
    """POST the report to ``webhook_url`` if set; returns {"published": bool}."""
    if not webhook_url:
        return {"published": False}
    body = json.dumps({"period": period, "text": text}).encode()
    request = urllib.request.Request(webhook_url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
        return {"published": True}
