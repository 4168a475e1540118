"""The optional OpenAI-compatible summariser, against a mocked HTTP transport (no network).

What it sends (endpoint, key, model, limits, no tool payloads), and that every failure
falls back to the deterministic text for that chunk, so compaction never depends on a
model being reachable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from opensquilla.session import SessionManager
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.fallback import IDENTIFIER_INSTRUCTION
from opensquilla.session.llm import OpenAICompatibleSummarizer, chat_completions_url

SECRET = "sk-test-0123456789-very-secret"
Handler = Callable[[httpx.Request], httpx.Response]


def answer(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": text}}]})


class Recorder:
    """A mock endpoint that records requests and answers through ``respond``."""

    def __init__(self, respond: Handler) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.respond(request)

    def summarizer(self) -> OpenAICompatibleSummarizer:
        return OpenAICompatibleSummarizer(transport=httpx.MockTransport(self))

    def body(self, index: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.requests[index].content)
        return body


def llm_config(**extra: Any) -> CompactionConfig:
    return CompactionConfig(api_key=SECRET, model="acme/compact-1", **extra)


CHUNK: list[dict[str, Any]] = [
    {"role": "user", "content": "please write the page"},
    {
        "role": "assistant",
        "content": "writing it",
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "function": {"name": "write_file", "arguments": "TOOL-PAYLOAD-" + "z" * 300},
            }
        ],
    },
]


# -- the request -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("https://llm.example/api", "https://llm.example/api/v1/chat/completions"),
        ("https://llm.example/api/", "https://llm.example/api/v1/chat/completions"),
        ("https://llm.example/v1", "https://llm.example/v1/chat/completions"),
        ("https://openrouter.ai/api/v1/", "https://openrouter.ai/api/v1/chat/completions"),
    ],
)
def test_endpoint_gets_v1_only_when_missing(base: str, url: str) -> None:
    assert chat_completions_url(base) == url


async def test_request_shape() -> None:
    endpoint = Recorder(lambda _: answer("  condensed by model  "))

    text = await endpoint.summarizer().summarize(
        CHUNK, config=llm_config(base_url="https://llm.example/api"), custom_instructions=None
    )

    assert text == "condensed by model"
    (request,) = endpoint.requests
    assert request.method == "POST"
    assert str(request.url) == "https://llm.example/api/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    body = endpoint.body()
    assert body["model"] == "acme/compact-1"
    assert body["max_tokens"] == 1024
    assert body["temperature"] == 0
    assert body["stream"] is False
    system, user = body["messages"]
    assert system["role"] == "system" and "compactor" in system["content"]
    assert IDENTIFIER_INSTRUCTION in system["content"]
    assert user["role"] == "user"
    assert user["content"].startswith("Summarize this conversation:")
    assert "please write the page" in user["content"]
    assert "TOOL-PAYLOAD-" not in request.content.decode()


async def test_instructions_and_identifier_policy_shape_the_prompt() -> None:
    endpoint = Recorder(lambda _: answer("ok"))

    await endpoint.summarizer().summarize(
        CHUNK, config=llm_config(identifier_policy="off"), custom_instructions="Keep it terse."
    )

    system = endpoint.body()["messages"][0]["content"]
    assert IDENTIFIER_INSTRUCTION not in system
    assert "Keep it terse." in system


@pytest.mark.parametrize("config", [CompactionConfig(model="m"), CompactionConfig(api_key=SECRET)])
async def test_no_request_without_both_key_and_model(config: CompactionConfig) -> None:
    endpoint = Recorder(lambda _: answer("never"))

    assert (
        await endpoint.summarizer().summarize(CHUNK, config=config, custom_instructions=None)
        is None
    )
    assert endpoint.requests == []


def raise_timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("slow model", request=request)


FAILURES: dict[str, Handler] = {
    "http_500": lambda _: httpx.Response(500, text="upstream exploded"),
    "timeout": raise_timeout,
    "not_json": lambda _: httpx.Response(200, text="<html>surprise</html>"),
    "wrong_shape": lambda _: httpx.Response(200, json={"choices": []}),
    "blank_answer": lambda _: answer("   "),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
async def test_any_failure_returns_none(failure: str) -> None:
    endpoint = Recorder(FAILURES[failure])

    result = await endpoint.summarizer().summarize(
        CHUNK, config=llm_config(), custom_instructions=None
    )

    assert result is None
    assert len(endpoint.requests) == 1


def test_config_repr_hides_the_key() -> None:
    config = llm_config()

    for shown in (repr(config), str(config), f"{config}", f"{config!r}"):
        assert SECRET not in shown
        assert "acme/compact-1" in shown
    assert "api_key=''" in repr(CompactionConfig())


# -- through the manager -----------------------------------------------------------------

KEY = "agent:main:llm"


async def fill(manager: SessionManager, key: str = KEY, count: int = 11) -> None:
    """``count`` 100-token messages; a 200-token window removes all but the newest."""
    await manager.create(key)
    for index in range(count):
        await manager.append_message(key, "user", f"turn {index}", token_count=100)


async def test_model_summary_is_stored_as_llm(manager: SessionManager) -> None:
    endpoint = Recorder(lambda _: answer("the model's account of it"))
    await fill(manager)

    result = await manager.compact_with_result(
        KEY, 200, config=llm_config(), summarizer=endpoint.summarizer()
    )

    assert len(endpoint.requests) == result.chunks_processed == 5
    assert result.summary_source == "llm"
    assert result.summary.count("the model's account of it") == 5
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "llm"
    assert row.summary_text == result.summary


async def test_failing_model_falls_back(manager: SessionManager) -> None:
    """Each failure kind compacts with the fallback text; none is an error."""
    for number, failure in enumerate(("http_500", "timeout", "not_json")):
        key = f"agent:main:llm-fail-{number}"
        await fill(manager, key, count=3)
        endpoint = Recorder(FAILURES[failure])

        result = await manager.compact_with_result(
            key, 200, config=llm_config(), summarizer=endpoint.summarizer()
        )

        assert endpoint.requests, failure
        assert result.removed_count == 2, failure
        assert result.summary_source == "fallback", failure
        assert "[Summary of 2 messages]\n  [user]: turn 0\n  [user]: turn 1" in result.summary
        (row,) = await manager.get_summaries(key)
        assert row.summary_source == "fallback"


async def test_some_chunks_failing_is_mixed(manager: SessionManager) -> None:
    calls = 0

    def every_other(_: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return answer("model part") if calls % 2 else httpx.Response(503)

    endpoint = Recorder(every_other)
    await fill(manager)

    result = await manager.compact_with_result(
        KEY, 200, config=llm_config(), summarizer=endpoint.summarizer()
    )

    assert result.summary_source == "mixed"
    assert result.summary.count("model part") == 3
    assert "  [user]: turn 2" in result.summary  # the second chunk fell back
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "mixed"
