"""Token estimation: one deterministic estimator for every budget and cut decision.

``len(text) // 4`` (at least 1): the estimate the contract was written against. It does not
depend on what else is installed, so cut points, chunks and quality-gate outcomes are the
same on every machine (docs/semantics.md#compaction).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def estimate_tokens_for_length(length: int) -> int:
    return max(1, length // 4)


def estimate_tokens(text: str | None) -> int:
    """Tokens in ``text``; ``estimate_tokens("") == 1`` as upstream."""
    return estimate_tokens_for_length(len(text or ""))


def stable_json(value: Any) -> str:
    """Sorted keys, non-ASCII kept, anything unknown as ``str``: for token counts and
    preimages, never for storage."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def entry_tokens(entry: Mapping[str, Any]) -> int:
    """The "model replay" size of one transcript entry (docs/semantics.md#compaction).

    A reported ``token_count`` covers the content only: tool-call JSON, the tool-call id and
    reasoning are always counted on top, so an under-reported count cannot hide a large
    tool payload.
    """
    reported = entry.get("token_count")
    content = entry.get("content")
    if reported:
        content_part = int(reported)
    elif content:
        content_part = estimate_tokens(str(content))
    else:
        content_part = 0
    extras: list[str] = []
    tool_calls = entry.get("tool_calls")
    if tool_calls:
        extras.append(stable_json(tool_calls))
    if entry.get("tool_call_id"):
        extras.append(str(entry["tool_call_id"]))
    if entry.get("reasoning_content"):
        extras.append(str(entry["reasoning_content"]))
    extra_part = estimate_tokens("\n".join(extras)) if extras else 0
    return content_part + extra_part
