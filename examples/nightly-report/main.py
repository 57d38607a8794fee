"""A cron trigger that starts one durable report workflow per match.

The ``scheduled`` handler runs at least once per recorded match (docs/spec/cron-trigger.md#cr-delivery: a redelivery of the
same (cron, scheduledTime) may call it again). It therefore derives the instance id from the
match's ``scheduledTime``: a second call for the same match asks for an id that already exists,
gets ``InstanceExists``, and does nothing. The report itself runs as a workflow, so a crash in
the middle of it resumes from the last recorded step instead of starting over.
"""

from __future__ import annotations

import datetime

import report

from takohost import InstanceExists


class ReportWorkflow:
    def __init__(self, env):
        self.webhook = env.REPORT_WEBHOOK_URL

    def run(self, event, step):
        period = event["params"]["period"]
        metrics = step.do("collect metrics", lambda: report.collect(period))
        text = step.do("render report", lambda: {"text": report.render(period, metrics)})["text"]
        delivery = step.do(
            "publish report",
            lambda: report.publish(self.webhook, period, text),
            {"maxAttempts": 5, "backoff": "exponential", "initialDelaySeconds": 30},
        )
        return {"period": period, "metrics": metrics, "report": text, "published": delivery["published"]}


def scheduled(event, env, ctx):
    """Start the report for the 24 hours before the match; idempotent per match."""
    matched_at = datetime.datetime.fromtimestamp(event["scheduledTime"] / 1000, tz=datetime.UTC)
    start = matched_at - datetime.timedelta(days=1)
    instance_id = "report-" + matched_at.strftime("%Y-%m-%dT%H:%MZ")
    params = {
        "cron": event["cron"],
        "scheduledTime": event["scheduledTime"],
        "period": {
            "start": start.isoformat().replace("+00:00", "Z"),
            "end": matched_at.isoformat().replace("+00:00", "Z"),
        },
    }
    try:
        env.REPORTS.create(id=instance_id, params=params)
    except InstanceExists:
        pass  # a redelivery of a match we already handled
