"""Notifications: build the messages, and deliver them to an optional JSON webhook.

``send`` returns what it did as a document, so every notification is visible in the instance's
history even when no webhook is configured.
"""

from __future__ import annotations

import json
import urllib.request


def ask_message(request):
    approvers = ", ".join(request.get("approvers", [])) or "the approvers"
    return f"{approvers}: please decide on {request.get('title', 'a request')!r} (from {request.get('requester', '?')})"


def reminder_message(request, number):
    return f"Reminder {number}: {request.get('title', 'a request')!r} still waits for a decision"


def expired_message(request):
    return f"{request.get('title', 'a request')!r} expired without a decision"


def outcome_message(request, decision):
    verdict = "approved" if decision.get("approved") else "rejected"
    comment = f": {decision['comment']}" if decision.get("comment") else ""
    return f"{request.get('title', 'a request')!r} was {verdict} by {decision.get('by', 'unknown')}{comment}"


def send(webhook_url, text):
    """Deliver ``text``; returns {"text", "delivered": bool}. A failing webhook raises (and the
    step fails), so give the step a retry policy if your webhook is flaky."""
    if not webhook_url:
        return {"text": text, "delivered": False}
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(webhook_url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {"text": text, "delivered": True, "status": response.status}
