"""What a tool call and a tool result look like in a transcript dict
(docs/semantics.md#skip-reasons).

One place for the shapes the older store and upstream write, so the cut planners, the API
rounds and the fallback summary agree on them: OpenAI-style ``tool_calls`` with an ``id``,
Anthropic-style ``tool_use``/``tool_result`` items with a ``tool_use_id``, ``tool`` rows with a
``tool_call_id``, and the legacy text markers (``[tool_call: …]``, ``[Used tool: …]``,
``[Tool result …``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def is_assistant_tool_call(entry: Mapping[str, Any]) -> bool:
    if entry.get("role") != "assistant":
        return False
    if entry.get("tool_calls"):
        return True
    content = entry.get("content") or ""
    return "[tool_call:" in content or "[Used tool:" in content


def is_tool_result(entry: Mapping[str, Any]) -> bool:
    if entry.get("role") == "tool" or entry.get("tool_call_id"):
        return True
    return (entry.get("content") or "").lstrip().startswith("[Tool result ")


def tool_items(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The structured items of ``entry["tool_calls"]`` (anything else in the list is ignored)."""
    return [item for item in entry.get("tool_calls") or [] if isinstance(item, Mapping)]


def item_call_id(item: Mapping[str, Any]) -> str | None:
    """The call id an item names (``id`` or ``tool_use_id``), ``None`` when it names none."""
    call_id = item.get("id") or item.get("tool_use_id")
    return str(call_id) if call_id else None


def call_name(item: Mapping[str, Any]) -> str | None:
    """The tool a call names: OpenAI's ``function.name``, else ``name``."""
    function = item.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    name = name or item.get("name")
    return str(name) if name else None


def is_result_item(item: Mapping[str, Any]) -> bool:
    """An item that carries a call's result rather than the call itself."""
    return item.get("type") == "tool_result" or "result" in item


def unanswered_calls(entries: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``{id: call item}`` of each identified call in ``entries`` whose result (a row with
    that ``tool_call_id``, or a result item with that id) is not among them, in order."""
    answered = {str(e["tool_call_id"]) for e in entries if e.get("tool_call_id")}
    calls: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        for item in tool_items(entry):
            call_id = item_call_id(item)
            if call_id is None:
                continue
            if is_result_item(item):
                answered.add(call_id)
            else:
                calls.setdefault(call_id, item)
    return {key: item for key, item in calls.items() if key not in answered}
