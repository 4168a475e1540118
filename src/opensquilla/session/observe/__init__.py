"""Observability: a debug record per operation, and OpenTelemetry spans and latency
histograms when the ``otel`` extra is installed (docs/observability.md).

``instrumented`` is applied to :class:`SessionManager` and :class:`SessionStorage`; the
application turns the records on with the ``opensquilla.session.ops`` logger at DEBUG and the
spans and histograms on by configuring OpenTelemetry's global providers.
"""

from __future__ import annotations

from .operations import (
    LATENCY_KINDS,
    OPERATIONS_LOGGER,
    instrumented,
    operation_of,
    public_coroutine_methods,
)
from .otel import HISTOGRAMS

__all__ = [
    "HISTOGRAMS",
    "LATENCY_KINDS",
    "OPERATIONS_LOGGER",
    "instrumented",
    "operation_of",
    "public_coroutine_methods",
]
