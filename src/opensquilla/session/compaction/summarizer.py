"""The summariser seam: what the manager calls, once per chunk, outside any transaction.

A summariser returns the chunk's summary text, or ``None`` when it could not produce one;
the deterministic fallback then stands in for that chunk. Implementations that talk to a
model live outside this pure package (``opensquilla.session.llm``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .config import CompactionConfig


@runtime_checkable
class Summarizer(Protocol):
    #: "llm" when the text came from a model; anything else counts as fallback.
    source: str

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None: ...


class FallbackSummarizer:
    """The deterministic summariser: no model involved.

    It returns ``None`` for every chunk, so the engine's fallback stands in: one summary of
    everything removed, within one budget (docs/semantics.md#fallback-summary), rather than
    one per chunk.
    """

    source = "fallback"

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        return None
