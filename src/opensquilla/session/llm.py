"""An LLM summariser for OpenAI-compatible chat endpoints (optional extra: ``[llm]``).

Any failure (no httpx, a timeout, an HTTP error, an unexpected body) returns ``None``, and
the compaction uses the deterministic fallback for that chunk. It runs outside any database
transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .compaction import CompactionConfig
from .compaction.fallback import IDENTIFIER_INSTRUCTION

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a conversation compactor. Summarise the conversation so that an agent can continue "
    "the task from your summary alone: the user's goal and constraints, decisions and their "
    "reasons, what was done and what failed, open questions and the next step. Be concise."
)
MAX_MESSAGE_CHARS = 4000


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


def format_chunk(chunk: Sequence[Mapping[str, Any]]) -> str:
    """The chunk as text for the model; tool payloads are named, not dumped."""
    lines = []
    for entry in chunk:
        content = str(entry.get("content") or "")
        if len(content) > MAX_MESSAGE_CHARS:
            content = content[:MAX_MESSAGE_CHARS] + "..."
        calls = entry.get("tool_calls") or []
        names = [
            str(call.get("name") or (call.get("function") or {}).get("name") or call.get("type"))
            for call in calls
            if isinstance(call, Mapping)
        ]
        suffix = f" [tool_call: {', '.join(names)}]" if names else ""
        lines.append(f"[{entry.get('role')}]: {content}{suffix}")
    return "\n".join(lines)


def build_request(
    chunk: Sequence[Mapping[str, Any]], config: CompactionConfig, custom_instructions: str | None
) -> dict[str, Any]:
    system = SYSTEM_PROMPT
    if config.identifier_policy == "strict":
        system += "\n" + IDENTIFIER_INSTRUCTION
    if custom_instructions:
        system += "\nAdditional instructions: " + custom_instructions
    return {
        "model": config.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Summarize this conversation:\n" + format_chunk(chunk)},
        ],
        "max_tokens": 1024,
        "temperature": 0,
        "stream": False,
    }


class OpenAICompatibleSummarizer:
    """Summarises each chunk through ``POST <base_url>/v1/chat/completions``."""

    source = "llm"

    def __init__(self, *, transport: Any | None = None) -> None:
        self._transport = transport  # an httpx transport, for tests

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        if not config.llm_enabled:
            return None
        try:
            import httpx
        except ImportError:
            log.warning(
                "httpx is not installed (pip install 'opensquilla-session[llm]'); "
                "using the fallback summary",
                extra={"operation": "summarize"},
            )
            return None
        try:
            async with httpx.AsyncClient(
                timeout=config.timeout_seconds, transport=self._transport
            ) as client:
                response = await client.post(
                    chat_completions_url(config.base_url),
                    json=build_request(chunk, config, custom_instructions),
                    headers={"Authorization": f"Bearer {config.api_key}"},
                )
                response.raise_for_status()
                text = response.json()["choices"][0]["message"]["content"]
        except Exception as exc:  # any failure means: fall back for this chunk
            log.warning(
                "LLM summariser failed (%s); using the fallback summary",
                type(exc).__name__,
                extra={"operation": "summarize"},
            )
            return None
        return text.strip() if isinstance(text, str) and text.strip() else None
