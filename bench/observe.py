"""What the instrumentation costs an append (issue 15 item 8).

    python bench/observe.py [--backend sqlite|postgres] [--appends 2000] [--json PATH]

Appends through the public API, in interleaved blocks so that load on a shared machine hits
every variant alike, with the operations:
  uninstrumented       the wrapper removed (the methods as written)
  no otel package      the wrapper as when opentelemetry is not installed, debug off
  otel API, no SDK     the wrapper with the API's no-op proxies (no provider configured)
  debug records        the ``opensquilla.session.ops`` records written to /dev/null
  otel SDK             spans to an in-memory exporter and histograms (set last: the global
                       providers cannot be unset)
and the wrapper alone around an empty coroutine (no I/O), per call. Prints a table and JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from common import MESSAGE, fresh_target

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.observe import (
    OPERATIONS_LOGGER,
    instrumented,
    operation_of,
    operations,
    public_coroutine_methods,
)

HERE = Path(__file__).resolve().parent
Variant = Callable[[], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def uninstrumented() -> Iterator[None]:
    saved: list[tuple[type, str, Any]] = []
    for cls in (SessionManager, SessionStorage):
        for name, method in public_coroutine_methods(cls).items():
            if operation_of(method) is not None:
                saved.append((cls, name, method))
                setattr(cls, name, method.__wrapped__)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for cls, name, method in saved:
            setattr(cls, name, method)


@contextlib.contextmanager
def no_otel_package() -> Iterator[None]:
    telemetry, operations.TELEMETRY = operations.TELEMETRY, None
    try:
        yield
    finally:
        operations.TELEMETRY = telemetry


@contextlib.contextmanager
def as_installed() -> Iterator[None]:
    yield


@contextlib.contextmanager
def debug_records() -> Iterator[None]:
    logger = logging.getLogger(OPERATIONS_LOGGER)
    with open(os.devnull, "w") as sink:
        handler = logging.StreamHandler(sink)
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


def install_sdk() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


async def interleaved(
    variants: dict[str, Variant], one: Callable[[], Awaitable[Any]], total: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Microseconds per call of each variant: ``total`` calls in ``rounds`` blocks."""
    block = max(1, total // rounds)
    per_call: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():
            with variant():
                start = time.perf_counter_ns()
                for _ in range(block):
                    await one()
                per_call[name].append((time.perf_counter_ns() - start) / block / 1e3)
    return {
        name: {"median_us": statistics.median(runs), "mean_us": statistics.fmean(runs)}
        for name, runs in per_call.items()
    }


async def appends(backend: str, total: int, variants: dict[str, Variant]) -> dict[str, Any]:
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        try:
            manager = SessionManager(storage, inject_time_prefix=False)
            node = await manager.create("agent:main:observe")

            async def one() -> None:
                await manager.append_message(node.session_key, "user", MESSAGE, token_count=50)

            await interleaved(variants, one, 200, 2)  # warm-up: statement caches, pool
            return await interleaved(variants, one, total, 8)
        finally:
            await storage.close()


class Empty:
    async def call(self, session_key: str) -> list[int]:
        return []


Wrapped = instrumented("bench.", system=lambda _: "sqlite")(type("Wrapped", (Empty,), {}))


async def wrapper_alone(variants: dict[str, Variant], calls: int) -> dict[str, Any]:
    plain, wrapped = Empty(), Wrapped()
    figures = await interleaved(
        {"uninstrumented": as_installed}, lambda: plain.call("k"), calls, 10
    )
    figures |= await interleaved(variants, lambda: wrapped.call("k"), calls, 10)
    return figures


def show(title: str, figures: dict[str, dict[str, float]]) -> None:
    base = figures["uninstrumented"]["median_us"]
    print(f"\n{title}")
    print(f"  {'variant':<20} {'median us':>11} {'mean us':>9} {'overhead':>9}")
    for name, row in figures.items():
        extra = row["median_us"] - base
        print(f"  {name:<20} {row['median_us']:>11.2f} {row['mean_us']:>9.2f} {extra:>+9.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    before_sdk: dict[str, Variant] = {
        "uninstrumented": uninstrumented,
        "no otel package": no_otel_package,
        "otel API, no SDK": as_installed,
        "debug records": debug_records,
    }
    results: dict[str, Any] = {
        "appends": await appends(args.backend, args.appends, before_sdk),
        "wrapper_alone": await wrapper_alone(
            {name: variant for name, variant in before_sdk.items() if name != "uninstrumented"},
            200_000,
        ),
    }
    install_sdk()
    with_sdk: dict[str, Variant] = {"uninstrumented": uninstrumented, "otel SDK": as_installed}
    results["appends"] |= {
        name: figures
        for name, figures in (await appends(args.backend, args.appends, with_sdk)).items()
        if name != "uninstrumented"
    }
    results["wrapper_alone"] |= await wrapper_alone({"otel SDK": as_installed}, 50_000)

    show(
        f"append_message on {args.backend}, {args.appends} appends per variant", results["appends"]
    )
    show("the wrapper around an empty coroutine", results["wrapper_alone"])
    path = args.json or HERE / "results" / f"observe-{args.backend}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"backend": args.backend, **results}, indent=2) + "\n")
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    asyncio.run(main())
