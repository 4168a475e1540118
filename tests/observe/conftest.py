"""OpenTelemetry's SDK behind the global providers, with in-memory exporters.

The global providers can be set once per process, so the SDK is installed on first use and
stays; spans are sampled only while a test holds the ``telemetry`` fixture, so every other
test of the run keeps getting non-recording spans and the exporter keeps nothing of theirs.
Histograms use delta temporality: each read returns what was recorded since the last one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes


class Switch(Sampler):
    """Samples everything while on, nothing while off."""

    on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        decision = Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP
        return SamplingResult(decision, attributes)

    def get_description(self) -> str:
        return "test switch"


class Telemetry:
    """What the instrumented calls exported: finished spans and histogram points."""

    def __init__(self) -> None:
        self.switch = Switch()
        self.exporter = InMemorySpanExporter()
        self.reader = InMemoryMetricReader(
            preferred_temporality={Histogram: AggregationTemporality.DELTA}
        )
        tracer_provider = TracerProvider(sampler=self.switch)
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))
        if trace.get_tracer_provider() is not tracer_provider:
            raise RuntimeError("another test set the global tracer provider first")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [
            span for span in self.exporter.get_finished_spans() if name is None or span.name == name
        ]

    def histograms(self) -> dict[str, list[tuple[dict[str, Any], int]]]:
        """``(attributes, count)`` of each point, by histogram, recorded since the last
        read."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[tuple[dict[str, Any], int]]] = {}
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(
                        (dict(point.attributes or {}), point.count)  # type: ignore[union-attr]
                        for point in metric.data.data_points
                    )
        return found


_installed: list[Telemetry] = []


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    if not _installed:
        _installed.append(Telemetry())
    installed = _installed[0]
    installed.exporter.clear()
    installed.reader.get_metrics_data()  # drop what earlier tests recorded
    installed.switch.on = True
    try:
        yield installed
    finally:
        installed.switch.on = False
        installed.exporter.clear()
