"""Order fulfilment as a durable workflow: the shape of the Amazon SWF e-commerce history.

    verify order  ->  charge card (retried)  ->  wait for "shipped"  ->  record completion

Every ``step.do`` result is recorded by the host, so a crash or a redeploy never charges a card
twice for the same step: on replay the recorded result is returned and the effect is skipped.
Effects should still be idempotent (the host may run an attempt again if it died between the
effect and its commit), which is why the charge carries an idempotency key derived from the
order id.

params:  {"orderId": "A-1001", "customer": "ada@example.com", "paymentMethod": "pm_card_ok",
          "items": [{"sku": "TEA-01", "qty": 2, "unitPrice": 1250}]}     (prices in cents)
events:  "shipped" with payload {"carrier": "DHL", "trackingNumber": "..."}
output:  {"orderId", "status": "complete" | "rejected" | "payment_failed" | "refunded", ...}
"""

from __future__ import annotations

import inventory
import payments

from takohost import StepFailed, WaitTimeout

# Payment gateways fail transiently; retry with exponential backoff: 2 s, 4 s, 8 s, 16 s.
CHARGE_RETRY = {"maxAttempts": 5, "backoff": "exponential", "initialDelaySeconds": 2, "maxDelaySeconds": 60}


class OrderWorkflow:
    def __init__(self, env):
        self.currency = env.CURRENCY
        self.ship_timeout = env.SHIP_TIMEOUT_SECONDS

    def run(self, event, step):
        order = event.get("params", {})
        order_id = order.get("orderId", event["instanceId"])

        check = step.do("verify order", lambda: inventory.verify(order))
        if not check["ok"]:
            return {"orderId": order_id, "status": "rejected", "problems": check["problems"]}

        try:
            charge = step.do(
                "charge card",
                lambda: payments.charge(
                    idempotency_key=f"order-{order_id}",
                    payment_method=order.get("paymentMethod", ""),
                    amount=check["total"],
                    currency=self.currency,
                ),
                CHARGE_RETRY,
            )
        except StepFailed as failure:
            # Every attempt failed: the order is closed without shipping anything.
            return {"orderId": order_id, "status": "payment_failed", "reason": failure.message}

        try:
            shipment = step.wait_for_event(
                "wait for shipment", {"type": "shipped", "timeoutSeconds": self.ship_timeout}
            )
        except WaitTimeout:
            refund = step.do("refund charge", lambda: payments.refund(charge["chargeId"]))
            return {"orderId": order_id, "status": "refunded", "refundId": refund["refundId"]}

        shipment = shipment or {}
        receipt = step.do(
            "record completion", lambda: inventory.record_completion(order_id, charge, shipment)
        )
        return {
            "orderId": order_id,
            "status": "complete",
            "chargeId": charge["chargeId"],
            "amount": charge["amount"],
            "currency": charge["currency"],
            "trackingNumber": shipment.get("trackingNumber"),
            "completedAt": receipt["completedAt"],
        }
