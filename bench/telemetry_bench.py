"""The telemetry a replay context pays for, without the rest of the context (docs/spec/host-features.md#hf-observability).

Prints one JSON object: microseconds of CPU per context of ``--steps`` step attempts spent in
``workers.engine.observe`` (log fields, the store's commit wrapper, metrics, spans), with metrics
off, metrics on (``prometheus_client`` multiprocess files in a scratch directory), and metrics and
tracing on (the SDK with a no-op exporter). Compare with ``bench.engine_bench``'s CPU per
instance to see the share.

    python -m bench.telemetry_bench [--contexts 2000] [--steps 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import time

from services.telemetry import metrics, tracing
from takohost.domain import decide
from workers.engine import observe


class _Store:
    epoch = 1

    def start(self, **_: object) -> bool:
        return True

    def commit_attempt(self, **_: object) -> None:
        return None

    def commit_terminal(self, **_: object) -> None:
        return None


def _one_context(pk: int, steps: int) -> None:
    now = dt.datetime.now(dt.UTC)
    obs = observe.ContextObserver(pk)
    obs.begin()
    obs.instance_read(workflow_uid="wf", space="bench", instance_id=f"i-{pk}")
    with obs.spawn():
        pass
    store = obs.store(_Store())
    store.start(version_uid="v", now=now)
    obs.token_taken(epoch=1, version_uid="v")
    obs.steps_loaded({}, now=now)
    outcome = decide.AttemptSucceeded(result={"ok": True})
    for _ in range(steps):
        obs.attempt_started("step", 1)
        store.commit_attempt(name="step", outcome=outcome)
        obs.attempt_done(outcome)
    store.commit_terminal(status="complete", output={})
    obs.end("complete")


def _measure(contexts: int, steps: int) -> float:
    for pk in range(50):  # warm up
        _one_context(pk, steps)
    started = time.process_time()
    for pk in range(contexts):
        _one_context(pk, steps)
    return (time.process_time() - started) / contexts * 1e6


def main(argv: list[str] | None = None) -> None:
    """Run the three configurations and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("workers.engine.context").setLevel(logging.WARNING)  # no line per context
    report: dict[str, object] = {"steps_per_context": args.steps}
    os.environ.pop(metrics.ENV_DIR, None)
    tracing.use(None)
    report["off_us_per_context"] = round(_measure(args.contexts, args.steps), 1)
    with tempfile.TemporaryDirectory() as directory:
        os.environ[metrics.ENV_DIR] = directory
        report["metrics_us_per_context"] = round(_measure(args.contexts, args.steps), 1)
        try:
            from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

            class _Drop(SpanExporter):
                def export(self, spans: object) -> SpanExportResult:
                    return SpanExportResult.SUCCESS

            tracing.use(tracing.provider(exporter=_Drop(), processor="simple"))
            report["metrics_and_tracing_us_per_context"] = round(_measure(args.contexts, args.steps), 1)
            tracing.use(None)
        except ImportError:
            report["metrics_and_tracing_us_per_context"] = None
        os.environ.pop(metrics.ENV_DIR, None)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
