"""A structured payload as replay text (docs/semantics.md#rolling-checkpoints): the shape
summary replay cuts by section (:mod:`.summary_replay`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .summary_replay import STRUCTURED_HEADER

#: (section title, payload key), in rendering order.
_SECTIONS = (
    ("Goal", "user_goal"),
    ("Current Status", "current_status"),
    ("Next Action", "next_action"),
    ("Completed Steps", "completed_steps"),
    ("Open Steps", "open_steps"),
    ("Files and Artifacts", "files_and_artifacts"),
    ("Tool Results To Remember", "tool_results_to_remember"),
    ("Decisions and Rationale", "decisions_and_rationale"),
    ("Known Failures", "known_failures"),
    ("Important Identifiers", "important_identifiers"),
    ("Constraints and Preferences", "constraints_and_preferences"),
    ("Do Not Repeat", "do_not_repeat"),
    ("Unresolved Questions", "unresolved_questions"),
    ("Critical Carry Forward", "critical_carry_forward"),
)


def _lines(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return ["; ".join(f"{key}: {item}" for key, item in value.items())]
    if isinstance(value, list):
        return [line for item in value for line in _lines(item)]
    text = "" if value is None else str(value).strip()
    return [text] if text else []


def render_structured_summary(payload: Mapping[str, Any]) -> str:
    """``payload`` as a structured summary: :data:`STRUCTURED_HEADER`, then one ``Title:``
    section per non-empty field, each after a blank line (list items as ``- item`` lines,
    a dict item as ``key: value; ...``); the header alone when every field is empty."""
    parts = [STRUCTURED_HEADER]
    for title, key in _SECTIONS:
        value = payload.get(key)
        lines = _lines(value)
        if lines:
            body = lines if isinstance(value, str) else [f"- {line}" for line in lines]
            parts.append(f"{title}:\n" + "\n".join(body))
    return "\n\n".join(parts)
