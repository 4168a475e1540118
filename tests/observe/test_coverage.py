"""Every public operation of the front door and of the storage is instrumented."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.observe import (
    LATENCY_KINDS,
    instrumented,
    operation_of,
    public_coroutine_methods,
)

# What is deliberately left alone (each one named where the class is decorated).
EXCLUDED = {
    SessionManager: {"notify_message_appended"},
    SessionStorage: {"connect_without_migrating", "close"},
}
PREFIX = {SessionManager: "", SessionStorage: "storage."}


@pytest.mark.parametrize("cls", [SessionManager, SessionStorage], ids=lambda c: c.__name__)
def test_every_public_coroutine_is_an_operation_but_the_excluded(cls: type) -> None:
    methods = public_coroutine_methods(cls)
    assert len(methods) > 40  # the listing finds the mixins' methods too
    assert EXCLUDED[cls] <= set(methods)
    for name, method in methods.items():
        expected = None if name in EXCLUDED[cls] else PREFIX[cls] + name
        assert operation_of(method) == expected, name
        if expected is not None:  # the signature and the docs stay the method's own
            original = method.__wrapped__  # type: ignore[attr-defined]
            assert inspect.signature(method) == inspect.signature(original)
            assert method.__doc__ == original.__doc__


def test_every_timed_operation_exists() -> None:
    names = set(public_coroutine_methods(SessionManager)) | set(
        public_coroutine_methods(SessionStorage)
    )
    assert set(LATENCY_KINDS) <= names
    assert set(LATENCY_KINDS.values()) == {"append", "read", "compaction"}


def test_a_method_added_later_is_covered_and_a_stale_exclusion_refused() -> None:
    class Mixin:
        async def later(self, session_key: str) -> list[int]:
            return [1, 2]

        async def _private(self) -> None:
            return None

        def plain(self) -> None:
            return None

    decorate = instrumented("x.", system=lambda _: "sqlite")
    covered = decorate(type("Covered", (Mixin,), {}))
    assert operation_of(covered.later) == "x.later"
    assert operation_of(covered._private) is None
    assert operation_of(covered.plain) is None

    with pytest.raises(TypeError, match="renamed"):
        instrumented("x.", system=lambda _: "sqlite", exclude=frozenset({"renamed"}))(
            type("Stale", (Mixin,), {})
        )


def test_without_the_otel_extra_the_store_runs_and_still_logs() -> None:
    """``opentelemetry`` made unimportable in a fresh interpreter: no telemetry object, the
    operations work, the debug records are written."""
    script = """
import asyncio, logging, sys
sys.modules["opentelemetry"] = None  # as if the package were not installed
from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.observe import otel

seen = []
handler = logging.Handler()
handler.emit = seen.append
logging.getLogger("opensquilla.session.ops").addHandler(handler)
logging.getLogger("opensquilla.session.ops").setLevel(logging.DEBUG)

async def main():
    async with SessionStorage(":memory:") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:plain")
        await manager.append_message("agent:main:plain", "user", "hello")

asyncio.run(main())
assert otel.TELEMETRY is None
print(sorted({record.operation for record in seen}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "'append_message'" in done.stdout
    assert "'storage.connect'" in done.stdout
