"""A simulated payment gateway (replace with your provider's client).

Payment methods ``pm_card_declined`` and ``pm_card_unavailable`` always fail, to show what
happens when every retry fails; any other method is charged. The charge id is derived from the
idempotency key, as a real gateway deduplicates on it.
"""

from __future__ import annotations

import hashlib


class PaymentError(Exception):
    """The gateway refused or could not process the request."""


def charge(*, idempotency_key, payment_method, amount, currency):
    """Charge ``amount`` cents; returns {"chargeId", "amount", "currency"}."""
    print(f"charging {amount} {currency} to {payment_method}")  # kept in the instance's logs
    if payment_method == "pm_card_declined":
        raise PaymentError("card declined")
    if payment_method == "pm_card_unavailable":
        raise PaymentError("gateway unavailable (HTTP 503)")
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:16]
    return {"chargeId": f"ch_{digest}", "amount": amount, "currency": currency}


def refund(charge_id):
    """Refund a charge in full; returns {"refundId"}."""
    return {"refundId": "re_" + charge_id.removeprefix("ch_")}
