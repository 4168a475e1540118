"""API rounds and the semantic tail, for the ``api_rounds`` cut policy
(docs/semantics.md#api-rounds, HEAD-FEATURES §5.3). Pure functions over transcript dicts.

An *API round* is what one model request answers: a user turn, or a tool exchange and the
assistant text that follows it. Cutting only between rounds keeps a tool call with its
results even when a result is stored as a user row (``[Tool result …]``). The *semantic tail*
is the latest round while it is still live (a question not answered yet, a call without its
result, a result that is still running): it stays raw whatever the budget says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .tools import (
    is_assistant_tool_call,
    is_result_item,
    is_tool_result,
    item_call_id,
    tool_items,
    unanswered_calls,
)

#: A result whose status or reason is one of these has not finished.
LIVE_STATUSES = frozenset(
    {
        "pending",
        "running",
        "in_progress",
        "unresolved",
        "waiting",
        "queued",
        "requires_action",
        "awaiting_approval",
    }
)
#: Preservation classes that mark a result as not final.
LIVE_PRESERVATION_CLASSES = frozenset({"ephemeral", "unresolved"})


def _holds_result(entry: Mapping[str, Any]) -> bool:
    return is_tool_result(entry) or any(is_result_item(item) for item in tool_items(entry))


def api_rounds(entries: Sequence[Mapping[str, Any]]) -> list[range]:
    """The rounds of ``entries``, in order, as contiguous index ranges covering all of them.

    A user row that is not a tool result opens a round. An assistant row opens one when the
    current round already holds a tool result or was closed. Tool calls and results keep a
    round open; a plain assistant row (no tool call) closes it. Rows of any other role join
    the current round.
    """
    rounds: list[range] = []
    start = 0
    holds_result = closed = False
    for index, entry in enumerate(entries):
        role = entry.get("role")
        result = is_tool_result(entry)
        if role == "user" and not result:
            opens = True
        elif role == "assistant" and not result:
            opens = holds_result or closed
        else:
            opens = False
        if opens and index > start:
            rounds.append(range(start, index))
            start, holds_result, closed = index, False, False
        if role == "assistant" and not result and not is_assistant_tool_call(entry):
            closed = True
        holds_result = holds_result or _holds_result(entry)
    if start < len(entries):
        rounds.append(range(start, len(entries)))
    return rounds


def round_start(rounds: Sequence[range], cut: int) -> int:
    """The start of the round that holds index ``cut`` (``cut`` itself past the last one)."""
    for group in rounds:
        if cut < group.stop:
            return group.start
    return cut


def _word(value: Any) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def has_live_status(item: Mapping[str, Any]) -> bool:
    """Whether a result (a row or a tool item) says, at its top level or in its
    ``execution_status``, that it has not finished."""
    for source in (item, item.get("execution_status")):
        if not isinstance(source, Mapping):
            continue
        if _word(source.get("status")) in LIVE_STATUSES:
            return True
        if _word(source.get("reason")) in LIVE_STATUSES:
            return True
        if _word(source.get("preservation_class")) in LIVE_PRESERVATION_CLASSES:
            return True
    return False


def _has_open_unidentified_call(rows: Sequence[Mapping[str, Any]]) -> bool:
    """An assistant call that names no call id (a text marker, or an item without an id)
    and after which nothing in the round is a result."""
    for position, row in enumerate(rows):
        if not is_assistant_tool_call(row):
            continue
        calls = [item for item in tool_items(row) if not is_result_item(item)]
        if calls and all(item_call_id(item) for item in calls):
            continue
        if not any(_holds_result(later) for later in rows[position:]):
            return True
    return False


def is_live_round(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a round still waits for something: it ends with a user row that is not a tool
    result, names a call id without a result, has an open call without an id, or holds a
    result with a live status, reason or preservation class."""
    if not rows:
        return False
    last = rows[-1]
    if last.get("role") == "user" and not is_tool_result(last):
        return True
    if unanswered_calls(rows) or _has_open_unidentified_call(rows):
        return True
    for row in rows:
        if is_tool_result(row) and has_live_status(row):
            return True
        if any(has_live_status(item) for item in tool_items(row)):
            return True
    return False


def semantic_tail_start(entries: Sequence[Mapping[str, Any]], rounds: Sequence[range]) -> int:
    """Where the semantic tail starts: the latest round's start while it is live, else
    ``len(entries)``. Older rounds never anchor it, however they ended."""
    if rounds:
        latest = rounds[-1]
        if is_live_round(entries[latest.start : latest.stop]):
            return latest.start
    return len(entries)
