"""A request that needs a human decision, with reminders, as a durable workflow.

    notify approvers -> wait for "decision" -> (no decision for REMIND_AFTER_SECONDS: remind, wait again)
                     -> approved: hold for params.holdSeconds (step.sleep) -> apply
                     -> rejected, or no decision after MAX_REMINDERS reminders: close

Each round has its own step names ("decision #1", "reminder #1", "decision #2", ...): step names
identify recorded results, so a name must not be reused for a different wait. The reminder timer
is the wait's own timeout rather than a separate sleep, so a decision that arrives at any moment
ends the wait at once; the sleep is used where nothing can interrupt it: the hold before an
approved change is applied (a change freeze, a cooling-off period).

params:  {"requestId": "CR-7", "title": "Raise the API rate limit", "requester": "ada",
          "approvers": ["grace", "alan"], "holdSeconds": 0}
events:  "decision" with payload {"approved": true | false, "by": "grace", "comment": "..."}
output:  {"requestId", "status": "applied" | "rejected" | "expired", "by"?, "reminders"}
"""

from __future__ import annotations

import notify

from takohost import WaitTimeout


class ApprovalWorkflow:
    def __init__(self, env):
        self.remind_after = env.REMIND_AFTER_SECONDS
        self.max_reminders = env.MAX_REMINDERS
        self.webhook = env.NOTIFY_WEBHOOK_URL

    def run(self, event, step):
        request = event.get("params", {})
        request_id = request.get("requestId", event["instanceId"])

        step.do("notify approvers", lambda: notify.send(self.webhook, notify.ask_message(request)))

        decision, reminders = None, 0
        for round_number in range(1, self.max_reminders + 2):
            try:
                decision = step.wait_for_event(
                    f"decision #{round_number}", {"type": "decision", "timeoutSeconds": self.remind_after}
                )
                break
            except WaitTimeout:
                if round_number > self.max_reminders:
                    break
                reminders = round_number
                step.do(
                    f"reminder #{round_number}",
                    lambda n=round_number: notify.send(self.webhook, notify.reminder_message(request, n)),
                )

        if decision is None:
            step.do("report expiry", lambda: notify.send(self.webhook, notify.expired_message(request)))
            return {"requestId": request_id, "status": "expired", "reminders": reminders}

        by = decision.get("by", "unknown")
        if not decision.get("approved"):
            step.do(
                "report rejection",
                lambda: notify.send(self.webhook, notify.outcome_message(request, decision)),
            )
            return {"requestId": request_id, "status": "rejected", "by": by, "reminders": reminders}

        hold = request.get("holdSeconds", 0)
        if type(hold) is int and hold > 0:
            step.sleep("hold before applying", hold)
        step.do("apply change", lambda: notify.send(self.webhook, notify.outcome_message(request, decision)))
        return {"requestId": request_id, "status": "applied", "by": by, "reminders": reminders}
