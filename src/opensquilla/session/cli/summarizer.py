"""The summariser a command compacts with: an LLM one from the ``--llm-*`` options and the
``OPENSQUILLA_SESSION_LLM_*`` environment, else the deterministic fallback.

The API key is read from the environment variable the settings name, here and nowhere
else; it is never an option, and never printed (:meth:`OpenAICompatibleSummarizer.describe`
shows only whether one is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compaction import FallbackSummarizer, Summarizer
from ..llm import LLMSettings, OpenAICompatibleSummarizer

OPTION_NAMES = {
    "base_url": "--llm-base-url",
    "model": "--llm-model",
    "api_key_env": "--llm-api-key-env",
    "timeout_seconds": "--llm-timeout",
}


@dataclass(frozen=True)
class LLMOptions:
    """The ``--llm-*`` options as given (``None``: not given, the environment decides)."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout: str | None = None


@dataclass(frozen=True)
class ChosenSummarizer:
    """The summariser to pass to the manager, and how to describe it to the operator."""

    summarizer: Summarizer
    description: dict[str, Any]


def fallback() -> ChosenSummarizer:
    """The deterministic summariser, described."""
    return ChosenSummarizer(
        FallbackSummarizer(),
        {"kind": "fallback", "reason": "no LLM base URL (--llm-base-url) configured"},
    )


def choose_summarizer(options: LLMOptions) -> ChosenSummarizer:
    """An LLM summariser if a base URL is configured (option or environment), else the
    deterministic fallback. Bad settings raise ``ConfigurationError`` naming them."""
    settings = LLMSettings.from_env(
        base_url=options.base_url,
        model=options.model,
        api_key_env=options.api_key_env,
        timeout_seconds=options.timeout,
        names=OPTION_NAMES,
    )
    if settings is None:
        return fallback()
    llm = OpenAICompatibleSummarizer.from_settings(settings)
    return ChosenSummarizer(llm, llm.describe())


def describe_line(description: dict[str, Any]) -> str:
    """One line for text output: which summariser ran."""
    if description.get("kind") == "llm":
        key = "API key from $" + str(description.get("api_key_env"))
        if not description.get("api_key_set"):
            key = "no API key"
        timeout = description.get("timeout_seconds")
        limit = f"timeout {timeout:g}s, " if isinstance(timeout, int | float) else ""
        return (
            f"llm, model {description.get('model')} at {description.get('endpoint')} ({limit}{key})"
        )
    return f"fallback (deterministic; {description.get('reason')})"
