"""OpenTelemetry for the store's operations, when ``opentelemetry-api`` is installed (the
``otel`` extra): a span per operation and latency histograms.

Spans and measurements go to the global tracer and meter providers, as the OTel convention
wants: the application configures them (an SDK, exporters, sampling) and this package never
does. Until it sets a tracer provider no span is started at all, and the meter's proxies
make a measurement a no-op. Without the package, :data:`TELEMETRY` is ``None`` and the
wrapper in ``operations.py`` never comes here.

Attributes carry the database system, the session key and a row count, never message
content, arguments or exception messages (which may quote either): a failed operation sets
the span's status to error with the exception's type, and records no exception event.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Final

try:
    from opentelemetry import context, metrics, trace
except ImportError:  # the optional extra is not installed
    context = metrics = trace = None  # type: ignore[assignment]

SCOPE: Final = "opensquilla.session"
OPERATION: Final = "opensquilla.session.operation"
#: The histograms, by the kind of operation they time (``LATENCY_KINDS`` maps operations).
HISTOGRAMS: Final = {
    kind: f"opensquilla.session.{kind}.duration" for kind in ("append", "read", "compaction")
}

# Set while an instrumented operation runs: an operation called by another one (the storage
# call under a manager append) gets its span, but only the outermost feeds a histogram, so
# one call the application made is one measurement.
_inside_operation: ContextVar[bool] = ContextVar("opensquilla_session_operation", default=False)


class Telemetry:
    """The tracer and the histograms, from the global providers."""

    def __init__(self) -> None:
        assert trace is not None and metrics is not None
        self.tracer = trace.get_tracer(SCOPE)
        meter = metrics.get_meter(SCOPE)
        self.histograms = {
            kind: meter.create_histogram(
                name, unit="ms", description=f"Duration of opensquilla-session {kind} calls"
            )
            for kind, name in HISTOGRAMS.items()
        }

    def operation(self, operation: str, kind: str | None, system: str, key: str | None) -> Call:
        """The context of one call: a span named ``opensquilla.session.<operation>``,
        current while it runs; the caller reports the outcome with :meth:`Call.finish`."""
        return Call(self, operation, kind, system, key)


class Call:
    """One running operation: its span (if a tracer provider is set) and the histogram that
    times it (if it is of a timed ``kind`` and the application made it, not another
    operation). A class rather than a generator: it runs on every call."""

    __slots__ = ("_attached", "_histogram", "_nested", "attributes", "span")

    def __init__(
        self, telemetry: Telemetry, operation: str, kind: str | None, system: str, key: str | None
    ) -> None:
        self.attributes = {"db.system": system, OPERATION: operation}
        outermost = not _inside_operation.get()
        self._histogram = telemetry.histograms[kind] if kind is not None and outermost else None
        self.span: trace.Span | None = None
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            attributes: dict[str, str] = dict(self.attributes)
            if key is not None:
                attributes["opensquilla.session.key"] = key
            self.span = telemetry.tracer.start_span(
                f"{SCOPE}.{operation}", kind=trace.SpanKind.CLIENT, attributes=attributes
            )

    def __enter__(self) -> Call:
        self._nested: Token[bool] = _inside_operation.set(True)
        if self.span is not None:
            self._attached = context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.span is not None:
            context.detach(self._attached)
            self.span.end()
        _inside_operation.reset(self._nested)

    def finish(self, elapsed_ms: float, rows: int | None, error_type: str | None) -> None:
        """Report the outcome: the row count or the error's type, and the duration."""
        if self.span is not None and self.span.is_recording():
            if rows is not None:
                self.span.set_attribute("opensquilla.session.rows", rows)
            if error_type is not None:
                self.span.set_attribute("error.type", error_type)
                self.span.set_status(trace.StatusCode.ERROR, error_type)
        if self._histogram is not None:
            attributes = self.attributes
            if error_type is not None:
                attributes = {**attributes, "error.type": error_type}
            self._histogram.record(elapsed_ms, attributes)


TELEMETRY: Final = Telemetry() if trace is not None else None
