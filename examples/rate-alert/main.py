"""Alert when an exchange rate crosses a threshold, as a durable workflow.

    fetch the rate (HTTP API, with requests) -> decide -> output

The HTTP call is a step: its result is recorded, so a replay of this instance never calls the API
again, and a failed call is retried by the step's policy.

params:  {"base": "EUR", "quote": "USD", "above": 1.05}
output:  {"base", "quote", "rate", "above", "alert": true | false}
"""

from __future__ import annotations

import rates

# A flaky API: three attempts, 2 s then 4 s apart.
FETCH_RETRY = {"maxAttempts": 3, "backoff": "exponential", "initialDelaySeconds": 2, "maxDelaySeconds": 10}


class RateAlertWorkflow:
    def __init__(self, env):
        self.api_url = env.RATES_API_URL

    def run(self, event, step):
        params = event.get("params", {})
        base, quote = params.get("base", "EUR"), params.get("quote", "USD")
        above = float(params.get("above", 1.0))
        fetched = step.do("fetch rate", lambda: rates.fetch_rate(self.api_url, base, quote), FETCH_RETRY)
        return {**fetched, "above": above, "alert": fetched["rate"] > above}
