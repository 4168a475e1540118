"""OpenTelemetry: a span per operation, latency histograms, through the global providers."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from opensquilla.session import SessionManager, SessionNotFoundError, SessionStorage
from opensquilla.session.observe import HISTOGRAMS

from .conftest import Telemetry
from .scenario import KEY, SECRET, converse


def attribute_text(telemetry: Telemetry) -> str:
    return "\n".join(
        f"{span.name} {dict(span.attributes or {})!r} {span.status.description} {span.events!r}"
        for span in telemetry.spans()
    )


async def test_every_operation_is_a_span_with_system_key_and_rows(
    manager: SessionManager, telemetry: Telemetry, backend: object
) -> None:
    await converse(manager)
    system = manager.storage.backend
    assert system in ("sqlite", "postgresql")

    appends = telemetry.spans("opensquilla.session.append_message")
    assert len(appends) == 8
    for span in appends:
        assert span.kind is SpanKind.CLIENT
        assert span.status.status_code is StatusCode.UNSET
        assert dict(span.attributes or {}) == {
            "db.system": system,
            "opensquilla.session.operation": "append_message",
            "opensquilla.session.key": KEY,
            "opensquilla.session.rows": 1,
        }
    [read] = telemetry.spans("opensquilla.session.get_transcript")
    assert (read.attributes or {})["opensquilla.session.rows"] == 8
    [compaction] = telemetry.spans("opensquilla.session.compact_with_result")
    assert (compaction.attributes or {})["opensquilla.session.rows"] > 0

    # One span per call: the manager's append runs its use case itself (issue 27's one
    # route), so no storage span is nested in it; a storage call has a span of its own.
    assert not telemetry.spans("opensquilla.session.storage.append_message_entry")
    session = await manager.get_session(KEY)
    assert session is not None
    live = await manager.storage.get_transcript(session.session_id)
    [direct] = telemetry.spans("opensquilla.session.storage.get_transcript")
    assert direct.parent is None
    assert (direct.attributes or {})["opensquilla.session.rows"] == len(live) > 0
    assert SECRET not in attribute_text(telemetry)


async def test_a_failing_operation_is_an_error_span_naming_only_the_type(
    manager: SessionManager, telemetry: Telemetry
) -> None:
    with pytest.raises(SessionNotFoundError):
        await manager.append_message("agent:main:missing", "user", SECRET)
    [span] = telemetry.spans("opensquilla.session.append_message")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "SessionNotFoundError"
    assert (span.attributes or {})["error.type"] == "SessionNotFoundError"
    assert "opensquilla.session.rows" not in (span.attributes or {})
    assert not span.events  # no exception event: its message could quote an argument
    assert SECRET not in attribute_text(telemetry)


async def test_histograms_time_the_calls_the_application_made(
    manager: SessionManager, telemetry: Telemetry
) -> None:
    await converse(manager)
    system = manager.storage.backend
    recorded = telemetry.histograms()

    def points(kind: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for attributes, count in recorded.get(HISTOGRAMS[kind], []):
            assert attributes["db.system"] == system
            found[attributes["opensquilla.session.operation"]] = count
        return found

    # The storage calls made under these are spans, but no second measurement.
    assert points("append") == {"append_message": 8}
    assert points("read") == {"get_transcript": 1}
    assert points("compaction") == {"compact_with_result": 1}


async def test_a_storage_call_the_application_makes_is_measured(
    storage: SessionStorage, manager: SessionManager, telemetry: Telemetry
) -> None:
    await converse(manager)
    node = await storage.get_session(KEY)
    assert node is not None
    telemetry.histograms()
    assert len(await storage.get_transcript(node.session_id)) > 0
    [(attributes, count)] = telemetry.histograms()[HISTOGRAMS["read"]]
    assert (attributes["opensquilla.session.operation"], count) == ("storage.get_transcript", 1)


async def test_a_failed_call_is_measured_with_its_error_type(
    manager: SessionManager, telemetry: Telemetry
) -> None:
    with pytest.raises(SessionNotFoundError):
        await manager.append_message("agent:main:missing", "user", "hello")
    [(attributes, count)] = telemetry.histograms()[HISTOGRAMS["append"]]
    assert count == 1
    assert attributes["error.type"] == "SessionNotFoundError"
