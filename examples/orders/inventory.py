"""Order checks and the order ledger (a stand-in for your database).

``verify`` is pure so that it can be tested without a host; ``record_completion`` is where the
real system would write the order's final state.
"""

from __future__ import annotations

import datetime


def verify(order):
    """Check an order document; returns {"ok": bool, "problems": [...], "total": cents}."""
    problems = []
    items = order.get("items")
    if not isinstance(items, list) or not items:
        problems.append("an order needs at least one item")
        items = []
    total = 0
    for index, item in enumerate(items):
        qty, price = item.get("qty"), item.get("unitPrice")
        if type(qty) is not int or qty < 1:
            problems.append(f"item {index}: qty must be a positive integer")
        elif type(price) is not int or price < 0:
            problems.append(f"item {index}: unitPrice must be a non-negative integer (cents)")
        else:
            total += qty * price
    if not order.get("paymentMethod"):
        problems.append("paymentMethod is required")
    return {"ok": not problems, "problems": problems, "total": total}


def record_completion(order_id, charge, shipment):
    """Mark the order complete; returns a receipt document."""
    return {
        "orderId": order_id,
        "chargeId": charge["chargeId"],
        "carrier": shipment.get("carrier"),
        "completedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
