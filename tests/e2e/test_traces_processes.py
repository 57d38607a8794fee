"""One trace per instance across real ``takohost api`` and ``worker`` processes (docs/spec/host-features.md#hf-observability
and 8): both export over OTLP/HTTP (``TAKOHOST_OTEL=1``, the ``otel`` extra) to a collector this
test runs, and the spans of the create request (api) and of every context, attempt and commit
(worker) arrive in the instance's one trace."""

from __future__ import annotations

import http.server
import threading

import pytest

from services.telemetry import tracing
from tests.support import workflows

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

FLOW = """
class Flow:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        a = step.do("first", lambda: {"n": 1})
        got = step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 600})
        return {"a": a, "got": got}
"""


class _Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()

        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's API
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def names(self, trace_id: int) -> list[str]:
        with self.lock:
            return [s.name for s in self.spans if int.from_bytes(s.trace_id, "big") == trace_id]

    def context_outcomes(self, trace_id: int) -> set[str]:
        """The ``takohost.outcome`` of every ``takohost.context`` span of the trace received so far."""
        with self.lock:
            return {
                a.value.string_value
                for s in self.spans
                if int.from_bytes(s.trace_id, "big") == trace_id and s.name == "takohost.context"
                for a in s.attributes
                if a.key == "takohost.outcome"
            }


def test_the_create_request_and_the_worker_contexts_land_in_one_trace():
    collector = _Collector()
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    env = {
        "TAKOHOST_OTEL": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    try:
        with workflows.private_stack(workers=1, beat=False, extra_env=env) as stack:
            deployed = workflows.deploy_http(stack.api_url, stack.token, stack.space, source=FLOW, class_name="Flow")
            http_instances = stack.instances(deployed.workflow)
            code, body = http_instances.call("POST", "", {"id": "traced"})
            assert code == 201, body
            workflows.wait_until(
                lambda: http_instances.status("traced")["status"] == "waiting", timeout=60, message="waiting"
            )
            code, _ = http_instances.call("POST", "/traced/events", {"type": "approved"})
            assert code == 202
            workflows.wait_until(
                lambda: http_instances.status("traced")["status"] == "complete", timeout=60, message="complete"
            )
            trace_id = tracing.trace_id_of(deployed.workflow, "traced")
            wanted = {"takohost.instance.create", "takohost.event.send", "takohost.context",
                      "takohost.step.attempt", "takohost.commit", "takohost.sandbox.spawn"}
            # A context's span ends after its last step's spans and may come in a later export
            # batch: wait for both contexts, not only for every name.
            workflows.wait_until(
                lambda: wanted <= set(collector.names(trace_id))
                and {"waiting", "complete"} <= collector.context_outcomes(trace_id),
                timeout=30,
                message="spans exported",
            )
        with collector.lock:
            mine = [s for s in collector.spans if int.from_bytes(s.trace_id, "big") == trace_id]
        root = tracing.root_span_id_of(deployed.workflow, "traced").to_bytes(8, "big")
        (create,) = [s for s in mine if s.name == "takohost.instance.create"]
        assert create.span_id == root and not create.parent_span_id
        contexts = [s for s in mine if s.name == "takohost.context"]
        assert len(contexts) >= 2 and all(c.parent_span_id == root for c in contexts)
        outcomes = {a.value.string_value for c in contexts for a in c.attributes if a.key == "takohost.outcome"}
        assert {"waiting", "complete"} <= outcomes
    finally:
        collector.shutdown()
