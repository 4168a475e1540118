"""An ADK event as one transcript entry, and back (docs/integrations-google-adk.md#events).

The event itself travels in the entry's metadata, ``{"adk_event": {...}}``: the JSON object
``DatabaseSessionService`` stores (``model_dump(exclude_none=True, mode="json")``: bytes as
base64 text), which the store keeps as JSON text and gives back exactly (key order, numbers),
validated back into an ``Event`` as ``DatabaseSessionService`` validates its own. The
entry's own fields carry what the store reads, so that search, the context view and
compaction see the conversation:

- ``role``: ``"user"`` for an event of author ``user``, ``"tool"`` for an event of function
  responses, ``"assistant"`` otherwise (the model, an agent, a tool's own event);
- ``content``: the text parts joined by a newline (``None`` when there is none); for an
  event of function responses, the responses as JSON;
- ``tool_calls``: the function calls, as OpenAI-style items (``id``, ``type: "function"``,
  ``function.name``, ``function.arguments`` as JSON text);
- ``tool_call_id``: the first function response's id; with several responses, each is also
  a result item of ``tool_calls`` (``type: "tool_result"``), so compaction keeps every call
  with its answer;
- ``reasoning_content``: the thought parts' text (assistant entries only).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.genai import types

from ...models import SessionSummary, TranscriptEntry
from ...models.messages import AppendFields

EVENT_FIELD = "adk_event"
COMPACTION_INVOCATION_ID = "opensquilla-compaction"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def event_message(event: Event) -> tuple[str, str | None, AppendFields]:
    """The entry that stores ``event`` (module docstring): role, content and the other
    fields of ``append_message``."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[types.FunctionResponse] = []
    parts: Sequence[types.Part] = (event.content.parts or []) if event.content else []
    for part in parts:
        if part.function_call is not None:
            call = part.function_call
            calls.append(
                {
                    "id": call.id or f"{event.id}:{len(calls)}",
                    "type": "function",
                    "function": {"name": call.name or "", "arguments": _json(call.args or {})},
                }
            )
        elif part.function_response is not None:
            responses.append(part.function_response)
        elif part.text is not None:
            (thoughts if part.thought else texts).append(part.text)
    role = "assistant"
    content = "\n".join(texts) if texts else None
    fields: AppendFields = {
        "metadata": {EVENT_FIELD: event.model_dump(exclude_none=True, mode="json")}
    }
    if responses:
        role = "tool"
        content = _json([{"id": r.id, "name": r.name, "response": r.response} for r in responses])
        fields["tool_call_id"] = responses[0].id or f"{event.id}:0"
        if len(responses) > 1:
            fields["tool_calls"] = [
                {"id": r.id or f"{event.id}:{i}", "type": "tool_result", "name": r.name}
                for i, r in enumerate(responses)
            ]
    elif event.author == "user":
        role = "user"
    if calls:
        fields["tool_calls"] = calls
    if thoughts and role == "assistant":
        fields["reasoning_content"] = "\n".join(thoughts)
    return role, content, fields


def entry_event(entry: TranscriptEntry) -> Event | None:
    """The event an entry stores, or ``None`` for an entry no ADK call wrote."""
    metadata = entry.metadata
    if not metadata:
        return None
    stored = metadata.get(EVENT_FIELD)
    if not isinstance(stored, dict):
        return None
    # The Python-mode validation of the stored object: about 1.7x faster than
    # ``model_validate_json`` of the same text here (ADK's and genai's models check JSON
    # input field by field); bytes come back from their base64 text either way.
    return Event.model_validate(stored)


def compaction_event(summary: SessionSummary, first_kept: Event | None) -> Event:
    """The summary of the folded events as one ADK compaction event: ADK's context builder
    reads ``actions.compaction`` as "these events, summarised" and gives the model the
    summary as the agent's own earlier turn. It covers everything before the first kept
    event (``end_timestamp`` just before it)."""
    created = summary.created_at / 1000
    end = created if first_kept is None else min(created, first_kept.timestamp - 1e-6)
    content = types.Content(role="model", parts=[types.Part(text=summary.summary_text)])
    return Event(
        id=f"opensquilla-compaction-{summary.id}",
        invocation_id=COMPACTION_INVOCATION_ID,
        author="user",
        timestamp=end,
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=0.0, end_timestamp=end, compacted_content=content
            )
        ),
    )
