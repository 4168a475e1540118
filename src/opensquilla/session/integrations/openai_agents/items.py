"""Agents SDK items onto transcript entries and back (docs/integrations-openai-agents.md).

An item is kept whole, exactly, in the entry's ``metadata`` under :data:`ITEM_KEY` (JSON
text: key order and numbers read back as written), and it is also *described* in the
entry's own fields so that search, the context view and compaction work on it:

- a message (``{"role": ..., "content": ...}``, with or without ``"type": "message"``): its
  role, and its text (a string content, or the text and refusal parts joined by newlines);
- a ``function_call``: role ``assistant``, ``tool_calls`` one chat-completions call
  ``{"id": call_id, "type": "function", "function": {"name", "arguments"}}``;
  ``custom_tool_call`` likewise (``"type": "custom"``); any other ``*_call`` item (hosted
  tools: web search, file search, computer, shell, MCP...) an assistant call of its type;
- a ``*_call_output`` item (``function_call_output`` and the other tools'): role ``tool``,
  ``tool_call_id`` its ``call_id``, content the output's text; ``mcp_approval_response``
  answers its ``approval_request_id`` the same way;
- a ``reasoning`` item: role ``assistant``, no content, ``reasoning_content`` the summary's
  text (so it never reaches a chat view's text);
- anything else: role ``assistant`` with whatever text it has.

A call and its output are then an assistant tool call and its tool result for the
compaction planner, which never cuts between them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...models import TranscriptEntry, TranscriptLine
from ...models.messages import MessageInput

ITEM_KEY = "openai_agents_item"
_MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})


def _text(value: Any) -> str | None:
    """The readable text of a content or an output: a string, or its text parts joined."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    if isinstance(value, Mapping):
        text = value.get("text")
        return text if isinstance(text, str) else json.dumps(value, ensure_ascii=False)
    return str(value)


def _call_id(item: Mapping[str, Any]) -> str | None:
    for name in ("call_id", "approval_request_id", "id"):
        value = item.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def to_message(item: Mapping[str, Any]) -> MessageInput:
    """The entry that stores ``item``: its fields as described above, the item in metadata."""
    if not isinstance(item, Mapping):
        raise TypeError(f"an Agents SDK item is a mapping (a dict), not {type(item).__name__}")
    kind = item.get("type")
    kind = kind if isinstance(kind, str) else "message"
    metadata = {ITEM_KEY: item if isinstance(item, dict) else dict(item)}
    role = item.get("role")
    if kind == "message" and isinstance(role, str) and role:
        return {"role": role, "content": _text(item.get("content")), "metadata": metadata}
    if kind == "reasoning":
        summary = _text(item.get("summary"))
        return {
            "role": "assistant",
            "content": None,
            "reasoning_content": summary or None,
            "metadata": metadata,
        }
    if kind.endswith("_output") or kind == "mcp_approval_response":
        return {
            "role": "tool",
            "content": _text(item.get("output")) or "",
            "tool_call_id": _call_id(item),
            "metadata": metadata,
        }
    if kind.endswith("_call") or kind == "mcp_approval_request":
        call: dict[str, Any] = {"id": _call_id(item), "type": kind}
        if kind == "function_call":
            call["type"] = "function"
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments")}
        elif kind == "custom_tool_call":
            call["type"] = "custom"
            call["custom"] = {"name": item.get("name"), "input": item.get("input")}
        elif isinstance(item.get("name"), str):
            call["name"] = item["name"]
        return {"role": "assistant", "content": None, "tool_calls": [call], "metadata": metadata}
    return {"role": "assistant", "content": _text(item.get("content")), "metadata": metadata}


def to_item(entry: TranscriptEntry | TranscriptLine) -> dict[str, Any] | None:
    """The item an entry (or its line, ``SessionManager.get_transcript_lines``) stores;
    for an entry written by other code (no item in its metadata): a message of its role
    and text, a tool row with a ``tool_call_id`` a ``function_call_output``, anything else
    ``None`` (left out)."""
    metadata = entry.metadata
    if metadata is not None:
        item = metadata.get(ITEM_KEY)
        if isinstance(item, dict):
            return item
    if entry.role in _MESSAGE_ROLES and not entry.tool_calls:
        return {"role": entry.role, "content": entry.content or ""}
    if entry.role == "tool" and entry.tool_call_id:
        return {
            "type": "function_call_output",
            "call_id": entry.tool_call_id,
            "output": entry.content or "",
        }
    return None
