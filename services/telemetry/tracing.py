"""Optional OpenTelemetry traces: one trace per instance (docs/spec/host-features.md#hf-observability).

Installed with the extra ``takohost[otel]`` (``opentelemetry-api``, ``-sdk`` and the OTLP/HTTP
exporter) and switched on with ``TAKOHOST_OTEL=1`` in the API, worker and beat environments; the
exporter is then configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables (``OTEL_SERVICE_NAME``
defaults to ``takohost``). Without the packages, or without the switch, every function here is a
no-op that costs one global read.

No trace context travels in Celery messages or rows: an instance's trace id is derived from the
instance itself (:func:`trace_id_of`: a SHA-256 of its DurableWorkflow UID and its id), so the
create request, each replay context, each step attempt and its commit, each ``send_event`` and
``terminate`` land in the same trace wherever they run. The create span is the trace's root (its
span id is derived too, :func:`root_span_id_of`, and given to the SDK through this module's id
generator); every later span is a child of it. An id reused after the retention purge (30 days)
continues the old trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Iterator
from typing import Any

_state: dict[str, Any] = {"checked": False, "tracer": None}
#: ``(trace_id, span_id)`` the id generator hands out for the next root span (the create span).
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("takohost_forced_ids", default=None)


def _digest(workflow_uid: str, instance_id: str) -> bytes:
    return hashlib.sha256(f"takohost-instance\x00{workflow_uid}\x00{instance_id}".encode()).digest()


def trace_id_of(workflow_uid: str, instance_id: str) -> int:
    """The 128-bit trace id of instance ``instance_id`` of DurableWorkflow ``workflow_uid`` (never 0)."""
    return int.from_bytes(_digest(workflow_uid, instance_id)[:16], "big") or 1


def root_span_id_of(workflow_uid: str, instance_id: str) -> int:
    """The 64-bit span id of the instance's create span, the parent of all its other spans."""
    return int.from_bytes(_digest(workflow_uid, instance_id)[16:24], "big") or 1


def _id_generator() -> Any:
    from opentelemetry.sdk.trace import id_generator

    class InstanceIds(id_generator.RandomIdGenerator):
        """Random ids, except for a create span: the instance's derived ids."""

        def generate_trace_id(self) -> int:
            forced = _forced.get()
            return forced[0] if forced else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced = _forced.get()
            if forced:
                _forced.set(None)  # only the root span takes it
                return forced[1]
            return super().generate_span_id()

    return InstanceIds()


def provider(*, exporter: Any = None, processor: str = "batch") -> Any:
    """A ``TracerProvider`` with this module's id generator, exporting to ``exporter`` (default:
    OTLP over HTTP when installed, else the console) through a batch (or ``"simple"``) processor."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace import export as sdk_export

    if exporter is None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        except ImportError:
            exporter = sdk_export.ConsoleSpanExporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "takohost"})
    made = TracerProvider(resource=resource, id_generator=_id_generator())
    make = sdk_export.SimpleSpanProcessor if processor == "simple" else sdk_export.BatchSpanProcessor
    made.add_span_processor(make(exporter))
    return made


def use(tracer_provider: Any | None) -> None:
    """Trace into ``tracer_provider`` from now on (``None``: stop tracing). Tests pass a provider
    with the SDK's ``InMemorySpanExporter``; processes call :func:`tracer` and get the default."""
    _state["checked"] = True
    _state["tracer"] = None if tracer_provider is None else tracer_provider.get_tracer("takohost")


def tracer() -> Any | None:
    """The tracer, or ``None`` when tracing is off (not installed, or ``TAKOHOST_OTEL`` unset)."""
    if not _state["checked"]:
        _state["checked"] = True
        if os.environ.get("TAKOHOST_OTEL", "").strip().lower() in ("1", "true", "yes", "on"):
            try:
                made = provider()
            except ImportError:
                made = None
            if made is not None:
                import atexit

                atexit.register(made.shutdown)
                _state["tracer"] = made.get_tracer("takohost")
    return _state["tracer"]


def _instance_parent(workflow_uid: str, instance_id: str) -> Any:
    from opentelemetry import trace

    parent = trace.SpanContext(
        trace_id=trace_id_of(workflow_uid, instance_id),
        span_id=root_span_id_of(workflow_uid, instance_id),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {f"takohost.{k}": v for k, v in attributes.items() if v is not None}


def start(
    name: str,
    *,
    instance: tuple[str, str] | None = None,
    parent: Any = None,
    root: bool = False,
    start_time: int | None = None,
    **attributes: Any,
) -> Any | None:
    """Start span ``name``: in the trace of ``instance`` (``(workflow_uid, instance_id)``; with
    ``root`` it is the trace's root, the create span), or as a child of span ``parent``; at
    ``start_time`` (ns since the epoch; default now). Attributes get the ``takohost.`` prefix. End it
    with :func:`end`. ``None`` when tracing is off."""
    tr = tracer()
    if tr is None:
        return None
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    if parent is not None:
        ctx = trace.set_span_in_context(parent)
    elif instance is not None and root:
        ctx = otel_context.Context()
        token = _forced.set((trace_id_of(*instance), root_span_id_of(*instance)))
        try:
            return tr.start_span(name, context=ctx, attributes=_clean(attributes), start_time=start_time)
        finally:
            _forced.reset(token)
    elif instance is not None:
        ctx = _instance_parent(*instance)
    else:
        ctx = None
    return tr.start_span(name, context=ctx, attributes=_clean(attributes), start_time=start_time)


def end(span: Any | None, *, error: BaseException | str | None = None, **attributes: Any) -> None:
    """Set ``attributes`` on ``span`` (``None``: nothing) and end it; ``error`` marks it failed."""
    if span is None:
        return
    if attributes:
        span.set_attributes(_clean(attributes))
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, str(error)))
        if isinstance(error, BaseException):
            span.record_exception(error)
    span.end()


@contextlib.contextmanager
def span(
    name: str, *, instance: tuple[str, str] | None = None, parent: Any = None, root: bool = False, **attributes: Any
) -> Iterator[Any | None]:
    """:func:`start` … :func:`end` around a block; an exception marks the span failed."""
    current = start(name, instance=instance, parent=parent, root=root, **attributes)
    try:
        yield current
    except BaseException as exc:
        end(current, error=exc)
        raise
    end(current)
