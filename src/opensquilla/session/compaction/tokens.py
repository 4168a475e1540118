"""Token estimation: one deterministic estimator for every budget and cut decision.

``len(text) // 4`` (at least 1): the estimate the contract was written against. It does not
depend on what else is installed, so cut points, chunks and quality-gate outcomes are the
same on every machine (docs/semantics.md#compaction).

An entry is sized as the model will replay it (HEAD-FEATURES §5.7): its content, at least
as large as the estimate of its text whatever count was persisted with it, plus the full
tool-call JSON, the tool-call id and the raw reasoning. The compact description of an entry
for the summariser's input is sized in ``tool_payload.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: The optional keys of a replayed message, in the order a model request carries them.
REPLAY_KEYS = ("tool_calls", "tool_call_id", "reasoning_content")


def estimate_tokens_for_length(length: int) -> int:
    return max(1, length // 4)


def estimate_tokens(text: str | None) -> int:
    """Tokens in ``text``; ``estimate_tokens("") == 1`` as upstream."""
    return estimate_tokens_for_length(len(text or ""))


def stable_json(value: Any) -> str:
    """Sorted keys, non-ASCII kept, anything unknown as ``str``: for token counts and
    preimages, never for storage."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def content_tokens(entry: Mapping[str, Any]) -> int:
    """The content part of an entry's size: the persisted ``token_count`` or the estimate of
    the content, whichever is larger (0 for no content and no count).

    A persisted count may be under-reported (a client counting only what it streamed); the
    estimate is a floor, so such a count can never make a long message look short.
    """
    content = entry.get("content")
    estimated = estimate_tokens(str(content)) if content else 0
    return max(int(entry.get("token_count") or 0), estimated)


def joined_tokens(extras: Iterable[str]) -> int:
    """The estimate of the extras joined by newlines; 0 when there are none."""
    joined = list(extras)
    return estimate_tokens("\n".join(joined)) if joined else 0


def estimate_entry_model_replay_tokens(entry: Mapping[str, Any]) -> int:
    """The size of ``entry`` as a model request replays it (docs/semantics.md#compaction):
    :func:`content_tokens` plus the full tool-call JSON, the tool-call id and the raw
    reasoning, so neither an under-reported count nor a summarised preview can hide a large
    tool payload. Every budget, cut and skip decision uses it."""
    return sized_with_extras(entry, stable_json, str)


def sized_with_extras(
    entry: Mapping[str, Any],
    tool_calls: Callable[[Any], str],
    reasoning: Callable[[str], str],
) -> int:
    """:func:`content_tokens` plus the estimate of the entry's set :data:`REPLAY_KEYS` as
    text, joined by newlines: ``tool_calls`` and the reasoning (as a string) each through
    its rendering, the tool-call id as a string. Both entry sizes are this, rendered their
    way."""
    renderings: tuple[Callable[[Any], str], ...] = (
        tool_calls,
        str,
        lambda value: reasoning(str(value)),
    )
    extras = [
        render(entry[key])
        for key, render in zip(REPLAY_KEYS, renderings, strict=True)
        if entry.get(key)
    ]
    return content_tokens(entry) + joined_tokens(extras)


#: The engine's name for :func:`estimate_entry_model_replay_tokens` (exported before it).
entry_tokens = estimate_entry_model_replay_tokens


def estimate_entries_model_replay_chars(entries: Iterable[Mapping[str, Any]]) -> int:
    """The characters of ``entries`` as the JSON list of replayed messages: ``role`` and
    ``content`` always, ``tool_calls``, ``tool_call_id`` and ``reasoning_content`` when set."""
    messages = []
    for entry in entries:
        message = {"role": entry.get("role"), "content": entry.get("content")}
        message.update({key: entry[key] for key in REPLAY_KEYS if entry.get(key)})
        messages.append(message)
    return len(stable_json(messages))
