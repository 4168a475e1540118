"""The LLM summariser against a real HTTP server (tests/fake_llm.py) through the manager,
on both backends: the summary comes from the server, the key goes as a Bearer header and
nowhere else, and a timeout or a 500 falls back for that chunk only."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.llm import LLMSettings, OpenAICompatibleSummarizer

from ..fake_llm import FakeLLM, running

SECRET = "sk-server-0123456789-very-secret"
KEY = "agent:main:llm-server"
MODEL = "acme/compact-1"


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    yield from running(reply="model summary {n}")


def summarizer(fake: FakeLLM, *, timeout: float = 30.0) -> OpenAICompatibleSummarizer:
    settings = LLMSettings(
        base_url=fake.base_url, model=MODEL, api_key_env="FAKE_LLM_KEY", timeout_seconds=timeout
    )
    return OpenAICompatibleSummarizer.from_settings(settings, environ={"FAKE_LLM_KEY": SECRET})


async def fill(manager: SessionManager, count: int) -> None:
    """``count`` 100-token messages; a 200-token window removes all but the newest."""
    await manager.create(KEY)
    for index in range(count):
        await manager.append_message(KEY, "user", f"turn {index}", token_count=100)


async def test_summary_comes_from_the_server(
    manager: SessionManager, fake: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    await fill(manager, 11)

    result = await manager.compact_with_result(KEY, 200, summarizer=summarizer(fake))

    assert fake.call_count == result.chunks_processed == 5
    assert {call.path for call in fake.calls} == {"/v1/chat/completions"}
    assert {call.authorization for call in fake.calls} == {f"Bearer {SECRET}"}
    assert {call.model for call in fake.calls} == {MODEL}
    assert "turn 0" in fake.calls[0].prompt and "turn 9" not in fake.calls[0].prompt
    assert result.summary_source == "llm"
    for number in range(1, 6):
        assert f"model summary {number}" in result.summary
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "llm" and row.summary_text == result.summary
    assert SECRET not in caplog.text


async def test_timeout_falls_back_for_that_chunk_only(
    manager: SessionManager, fake: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The first request never gets an answer (the server holds it until the test ends):
    that chunk gets the deterministic text, the next one the model's."""
    fake.script = ["hang"]
    await fill(manager, 3)

    result = await manager.compact_with_result(KEY, 200, summarizer=summarizer(fake, timeout=0.3))

    assert fake.call_count == 2 == result.chunks_processed
    assert result.removed_count == 2
    assert result.summary_source == "mixed"
    assert "[user]: turn 0" in result.summary  # the fallback text of the first chunk
    assert "model summary 2" in result.summary and "too late" not in result.summary
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "mixed"
    assert "LLM summariser failed (ReadTimeout)" in caplog.text
    assert SECRET not in caplog.text


async def test_server_error_falls_back(
    manager: SessionManager, fake: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    fake.default = "error"
    await fill(manager, 3)

    result = await manager.compact_with_result(KEY, 200, summarizer=summarizer(fake))

    assert fake.call_count == 2
    assert result.removed_count == 2
    assert result.summary_source == "fallback"
    assert "upstream exploded" not in result.summary
    assert "[user]: turn 0" in result.summary and "[user]: turn 1" in result.summary
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "fallback"
    assert "LLM summariser failed (HTTPStatusError, HTTP 500)" in caplog.text
    assert SECRET not in caplog.text


async def test_no_key_sends_no_authorization(manager: SessionManager, fake: FakeLLM) -> None:
    """A local server that wants no key: no Authorization header at all."""
    llm = OpenAICompatibleSummarizer.from_settings(
        LLMSettings(base_url=fake.base_url, model=MODEL), environ={}
    )
    await fill(manager, 3)

    result = await manager.compact_with_result(KEY, 200, summarizer=llm)

    assert result.summary_source == "llm"
    assert [call.authorization for call in fake.calls] == [None, None]


async def test_settings_win_over_the_config(manager: SessionManager, fake: FakeLLM) -> None:
    """A summariser built from settings ignores CompactionConfig's model, key and URL."""
    await fill(manager, 3)
    config = CompactionConfig(model="config-model", api_key="config-key", base_url="http://x")

    result = await manager.compact_with_result(KEY, 200, config, summarizer=summarizer(fake))

    assert result.summary_source == "llm"
    assert {call.model for call in fake.calls} == {MODEL}
    assert {call.authorization for call in fake.calls} == {f"Bearer {SECRET}"}


async def test_manager_wide_summarizer(storage: SessionStorage, fake: FakeLLM) -> None:
    """SessionManager(storage, summarizer=...) compacts every session with it."""
    manager = SessionManager(storage, inject_time_prefix=False, summarizer=summarizer(fake))
    await fill(manager, 3)

    result = await manager.compact_with_result(KEY, 200)

    assert result.summary_source == "llm" and fake.call_count == 2
