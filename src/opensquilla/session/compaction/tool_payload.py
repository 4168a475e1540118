"""The compaction input's view of an entry (HEAD-FEATURES §5.7): tool payloads described,
not copied, so the size of what a summariser is shown stays bounded however large the
arguments were.

Each tool call is reduced to its name, id and input: an input value longer than
:data:`LONG_VALUE_CHARS` characters becomes its length, a SHA-256 prefix and a preview of its
head and tail. Reasoning is reduced to a line stating its length. Budget and cut decisions
never use this size (``tokens.estimate_entry_model_replay_tokens`` does): a description is
small precisely when the replay it stands for is large.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .tokens import sized_with_extras, stable_json
from .tools import call_name, item_call_id

LONG_VALUE_CHARS = 240
PREVIEW_CHARS = 64  # at each end of a long value
DIGEST_CHARS = 16  # hex characters of the SHA-256 kept

_INPUT_KEYS = ("input", "arguments")


def describe_value(value: Any) -> Any:
    """``value`` itself when its text is at most :data:`LONG_VALUE_CHARS` characters, else a
    description: ``{"chars", "sha256", "head", "tail"}`` of that text."""
    text = value if isinstance(value, str) else stable_json(value)
    if len(text) <= LONG_VALUE_CHARS:
        return value
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {
        "chars": len(text),
        "sha256": digest[:DIGEST_CHARS],
        "head": text[:PREVIEW_CHARS],
        "tail": text[-PREVIEW_CHARS:],
    }


def _first(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((mapping[key] for key in keys if mapping.get(key) is not None), None)


def _call_input(call: Mapping[str, Any]) -> Any:
    """The call's arguments: ``input``/``arguments``, or OpenAI's ``function.arguments``; a
    JSON text of an object is read as that object."""
    function = call.get("function")
    raw = _first(call, _INPUT_KEYS)
    if raw is None and isinstance(function, Mapping):
        raw = _first(function, _INPUT_KEYS)
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except ValueError:
            return raw
        return decoded if isinstance(decoded, dict) else raw
    return raw


def describe_tool_call(call: Any) -> dict[str, Any]:
    """One tool call as ``{"name", "id", "input"}``: the input's keys with their values
    through :func:`describe_value` (a non-object input is described whole)."""
    if not isinstance(call, Mapping):
        return {"name": None, "id": None, "input": describe_value(call)}
    arguments = _call_input(call)
    if isinstance(arguments, Mapping):
        described: Any = {str(key): describe_value(value) for key, value in arguments.items()}
    else:
        described = None if arguments is None else describe_value(arguments)
    return {"name": call_name(call), "id": item_call_id(call), "input": described}


def summarize_tool_calls(tool_calls: Any) -> str:
    """The compact JSON description of an entry's ``tool_calls`` (a list, or one call)."""
    calls = tool_calls if isinstance(tool_calls, list | tuple) else [tool_calls]
    return stable_json([describe_tool_call(call) for call in calls])


def reasoning_line(reasoning: str) -> str:
    """What the compaction input says about reasoning: its length only, never its text."""
    return f"[reasoning: {len(reasoning)} characters]"


def estimate_entry_replay_tokens(entry: Mapping[str, Any]) -> int:
    """The size of ``entry`` as the compaction input describes it: the content part (as
    ``tokens.content_tokens``) plus the estimate of the tool-call description, the tool-call
    id and the reasoning line, joined by newlines."""
    return sized_with_extras(entry, summarize_tool_calls, reasoning_line)
