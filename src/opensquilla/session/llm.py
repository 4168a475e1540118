"""An LLM summariser for OpenAI-compatible chat endpoints (optional extra: ``[llm]``).

Any failure (no httpx, a timeout, an HTTP error, an unexpected body) returns ``None``, and
the compaction uses the deterministic fallback for that chunk. It runs outside any database
transaction.

Configured either through a :class:`CompactionConfig` (``api_key`` and ``model`` set: the
manager builds one on its own), or, independently of that config, from an
:class:`LLMSettings` (:meth:`OpenAICompatibleSummarizer.from_settings`), which reads the
environment (``OPENSQUILLA_SESSION_LLM_*``) or takes the CLI's ``--llm-*`` options. The API
key is only ever read from an environment variable (or handed in by code), and never shown:
not in a repr, an error message or a log line. The settings and their checks are in
``llm_settings.py`` (re-exported here).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .compaction import CompactionConfig
from .compaction.fallback import IDENTIFIER_INSTRUCTION
from .errors import ConfigurationError
from .llm_settings import (
    API_KEY_ENV,
    API_KEY_ENV_ENV,
    BASE_URL_ENV,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MODEL_ENV,
    TIMEOUT_ENV,
    LLMSettings,
    chat_completions_url,
)

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a conversation compactor. Summarise the conversation so that an agent can continue "
    "the task from your summary alone: the user's goal and constraints, decisions and their "
    "reasons, what was done and what failed, open questions and the next step. Be concise."
)
MAX_MESSAGE_CHARS = 4000


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
    chunk: Sequence[Mapping[str, Any]],
    config: CompactionConfig,
    custom_instructions: str | None,
    *,
    model: str | None = None,
) -> dict[str, Any]:
    """The chat-completions body; ``model`` (from :class:`LLMSettings`) overrides
    ``config.model``."""
    system = SYSTEM_PROMPT
    if config.identifier_policy == "strict":
        system += "\n" + IDENTIFIER_INSTRUCTION
    if custom_instructions:
        system += "\nAdditional instructions: " + custom_instructions
    return {
        "model": model if model is not None else config.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Summarize this conversation:\n" + format_chunk(chunk)},
        ],
        "max_tokens": 1024,
        "temperature": 0,
        "stream": False,
    }


class OpenAICompatibleSummarizer:
    """Summarises each chunk through ``POST <base_url>/v1/chat/completions``.

    Built bare (``OpenAICompatibleSummarizer()``), it takes the endpoint, model, key and
    timeout from each call's :class:`CompactionConfig` and only calls when
    ``config.llm_enabled``. Built with :meth:`from_settings`, it uses its settings and
    ignores those config fields.
    """

    source = "llm"

    def __init__(
        self,
        *,
        transport: Any | None = None,
        settings: LLMSettings | None = None,
        api_key: str = "",
    ) -> None:
        if settings is not None and not isinstance(settings, LLMSettings):
            raise ConfigurationError(
                f"settings must be an LLMSettings or None, not {type(settings).__name__}"
            )
        if not isinstance(api_key, str):
            raise ConfigurationError(f"api_key must be a string, not {type(api_key).__name__}")
        self._transport = transport  # an httpx transport, for tests
        self._settings = settings
        self._api_key = api_key

    @classmethod
    def from_settings(
        cls,
        settings: LLMSettings,
        *,
        api_key: str | None = None,
        environ: Mapping[str, str] | None = None,
        transport: Any | None = None,
    ) -> OpenAICompatibleSummarizer:
        """A summariser for ``settings``; the key is ``api_key`` if given, else read now
        from the variable ``settings.api_key_env`` names (in ``environ``, default
        ``os.environ``).

        With the default variable unset, requests go without an ``Authorization`` header
        (local servers need none); a variable named on purpose (``api_key_env``) that is
        unset or empty is refused, since the requests would then fail one by one.
        """
        if not isinstance(settings, LLMSettings):
            raise ConfigurationError(
                f"settings must be an LLMSettings, not {type(settings).__name__}"
            )
        if api_key is None:
            env = os.environ if environ is None else environ
            api_key = env.get(settings.api_key_env, "").strip()
            if not api_key and settings.api_key_env != API_KEY_ENV:
                raise ConfigurationError(
                    f"the API key variable ${settings.api_key_env} is not set or empty (it is "
                    f"named by api_key_env, --llm-api-key-env or ${API_KEY_ENV_ENV}; unset "
                    f"that to use ${API_KEY_ENV})"
                )
        return cls(transport=transport, settings=settings, api_key=api_key)

    @property
    def settings(self) -> LLMSettings | None:
        return self._settings

    def __repr__(self) -> str:
        # Never the key: only whether there is one.
        key = "set" if self._api_key else "none"
        return f"OpenAICompatibleSummarizer(settings={self._settings!r}, api_key={key})"

    def describe(self) -> dict[str, Any]:
        """What an operator may see: the kind, endpoint, model and timeout (never the key)."""
        if self._settings is None:
            return {"kind": "llm", "configured_by": "CompactionConfig"}
        return {
            "kind": "llm",
            "endpoint": self._settings.endpoint,
            "model": self._settings.model,
            "timeout_seconds": self._settings.timeout_seconds,
            "api_key_env": self._settings.api_key_env,
            "api_key_set": bool(self._api_key),
        }

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        if self._settings is not None:
            url = self._settings.endpoint
            model: str | None = self._settings.model
            api_key = self._api_key
            timeout = self._settings.timeout_seconds
        elif config.llm_enabled:
            url = chat_completions_url(config.base_url)
            model = config.model
            api_key = config.api_key
            timeout = config.timeout_seconds
        else:
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
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            async with httpx.AsyncClient(timeout=timeout, transport=self._transport) as client:
                response = await client.post(
                    url,
                    json=build_request(chunk, config, custom_instructions, model=model),
                    headers=headers,
                )
                response.raise_for_status()
                text = response.json()["choices"][0]["message"]["content"]
        except Exception as exc:  # any failure means: fall back for this chunk
            # Only the kind and the status: an exception's text may quote the request.
            status = getattr(getattr(exc, "response", None), "status_code", None)
            log.warning(
                "LLM summariser failed (%s%s); using the fallback summary",
                type(exc).__name__,
                f", HTTP {status}" if isinstance(status, int) else "",
                extra={"operation": "summarize"},
            )
            return None
        return text.strip() if isinstance(text, str) and text.strip() else None


__all__ = [
    "API_KEY_ENV",
    "API_KEY_ENV_ENV",
    "BASE_URL_ENV",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MESSAGE_CHARS",
    "MAX_TIMEOUT_SECONDS",
    "MODEL_ENV",
    "SYSTEM_PROMPT",
    "TIMEOUT_ENV",
    "LLMSettings",
    "OpenAICompatibleSummarizer",
    "build_request",
    "chat_completions_url",
    "format_chunk",
]
