"""The deterministic fallback summary (docs/semantics.md#fallback-summary).

A summary that fits a token budget (by default a fifth of the tokens it replaces): first the
obligations the removed messages carry (goals, constraints, identifiers and pending tool
calls always; decisions, plans, errors, files, commands and open questions as the budget
allows), then the most informative messages, shortened: the first user request, the last
exchanges, the messages that name identifiers or files, then the newest of the rest.

Tool-call payloads, tool-call ids of finished calls and reasoning are never included, so a
large tool payload never reaches a summary. Files, commands and artifact names are listed
only when they sit within the first 200 characters of their message (the reach of the
contract's preview), so a fact the seed fallback missed is still reported missing and
carried forward (or, under ``coverage_blocking``, still blocks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import obligations as ob
from .tokens import entry_tokens
from .tools import call_name, tool_items, unanswered_calls

IDENTIFIER_INSTRUCTION = (
    "Preserve opaque identifiers exactly as written (UUIDs, hashes, ids, keys, hostnames, IPs, "
    "ports, URLs, file names); never shorten or reconstruct them."
)
PREVIEW_CHARS = 200
#: The summary's budget: this share of the tokens it replaces, at least MIN_BUDGET_TOKENS.
BUDGET_RATIO = 0.2
MIN_BUDGET_TOKENS = 96
#: Share of the room left after the header and the kept obligations that the other
#: obligations may take; the messages get the rest.
OBLIGATION_SHARE = 0.6
#: Message excerpt widths tried in turn when every message may be shown; past the last,
#: messages are chosen by priority at SELECTED_WIDTH characters each.
EXCERPT_WIDTHS = (200, 160, 120, 96, 72)
SELECTED_WIDTH = 96
LAST_EXCHANGES = 4  # the newest messages shown before older ones

_HEX12 = re.compile(r"[0-9a-fA-F]{12}")  # a cheap test before the identifier patterns

# (kind, label) in display order. Always kept: goals, constraints, identifiers, pending calls.
_LINE_LABELS = (
    (ob.USER_GOAL, "Goal"),
    (ob.USER_CONSTRAINT, "Constraint"),
    (ob.DECISION, "Decision"),
    (ob.NEXT_ACTION, "Plan"),
    (ob.DO_NOT_REPEAT, "Do not repeat"),
    (ob.FAILURE, "Error"),
    (ob.FILE_PATH, "File"),
    (ob.ARTIFACT, "Artifact"),
    (ob.COMMAND, "Command"),
    (ob.QUESTION, "Question"),
)
_ALWAYS = (ob.USER_GOAL, ob.USER_CONSTRAINT)
# Budgeted kinds, most important first (questions newest first).
_BUDGETED = (
    ob.DECISION,
    ob.DO_NOT_REPEAT,
    ob.NEXT_ACTION,
    ob.FAILURE,
    ob.FILE_PATH,
    ob.ARTIFACT,
    ob.COMMAND,
    ob.QUESTION,
)
# Listed only when the seed preview of their message showed them (see the module docstring).
_WITHIN_PREVIEW_ONLY = frozenset({ob.FILE_PATH, ob.ARTIFACT, ob.COMMAND})


def _attachment_text(content: str) -> str | None:
    """``{"text": ..., "attachments": [...]}`` envelopes reduced to text plus a note."""
    stripped = content.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        envelope = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(envelope, dict) or "attachments" not in envelope:
        return None
    text = str(envelope.get("text") or "")
    names = []
    for item in envelope.get("attachments") or []:
        if isinstance(item, dict):
            name = item.get("name") or item.get("filename") or "attachment"
            kind = item.get("type") or item.get("mime_type") or "file"
            names.append(f"{name} ({kind})")
    if names:
        text = f"{text} [user attached: {', '.join(names)}]".strip()
    return text


def message_text(content: Any) -> str:
    """The readable text of a message: attachment envelopes reduced, whitespace collapsed."""
    text = "" if content is None else str(content)
    text = _attachment_text(text) or text
    return " ".join(text.split())


def preview(content: Any, width: int = PREVIEW_CHARS) -> str:
    """The first ``width`` characters of the message text, ``...`` when it was longer."""
    text = message_text(content)
    return text if len(text) <= width else text[:width] + "..."


def budget_tokens_for(removed_tokens: int) -> int:
    """The fallback summary's budget for ``removed_tokens`` replaced tokens."""
    return max(MIN_BUDGET_TOKENS, int(removed_tokens * BUDGET_RATIO))


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def pending_tool_calls(entries: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """``{id: tool name}`` of each tool call in ``entries`` whose result is not among them."""
    return {key: call_name(call) for key, call in unanswered_calls(entries).items()}


def _pending_line(entries: Sequence[Mapping[str, Any]], found: Sequence[ob.Obligation]) -> str:
    """The pending calls the obligations name (at most 64), and how many more there are."""
    pending = pending_tool_calls(entries)
    if not pending:
        return ""
    named = [o.value for o in found if o.kind == ob.TOOL_RESULT_ID and o.value in pending]
    labels = [f"{key} ({pending[key]})" if pending[key] else key for key in named]
    more = len(pending) - len(named)
    if more:
        labels.append(f"and {more} more" if labels else plural(more, "call"))
    return f"Pending tool calls: {', '.join(labels)}"


@dataclass(frozen=True)
class _Message:
    """One message as the excerpt shows it: role, flattened text, tool names called."""

    index: int
    role: str
    text: str
    called: str

    def line(self, width: int) -> str:
        text = self.text if len(self.text) <= width else self.text[:width] + "..."
        if self.called:
            text = f"{text} {self.called}" if text else self.called
        return f"  [{self.role}]: {text}"

    def cost(self, width: int) -> int:
        shown = len(self.text) if len(self.text) <= width else width + 3
        called = len(self.called) + (1 if shown else 0) if self.called else 0
        return len(self.role) + 6 + shown + called + 1  # "  [" "]: " and the newline


def _messages(entries: Sequence[Mapping[str, Any]]) -> list[_Message]:
    """The messages with something to show (no empty role lines)."""
    out = []
    for index, entry in enumerate(entries):
        text = message_text(entry.get("content"))
        calls = tool_items(entry)
        names = [name for call in calls if (name := call_name(call))]
        if names:
            called = f"(called {', '.join(dict.fromkeys(names))})"
        else:
            called = "(called a tool)" if calls and not text else ""
        if text or called:
            out.append(_Message(index, str(entry.get("role")), text, called))
    return out


def _gap(count: int) -> str:
    return f"  [{plural(count, 'message')} not shown]"


def _informative(message: _Message) -> bool:
    """Names an identifier or a file path."""
    text = message.text
    if _HEX12.search(text) and (ob.UUID_RE.search(text) or ob.HEX_RUN_RE.search(text)):
        return True
    return ("/" in text or "\\" in text) and bool(ob.file_paths(text))


def _excerpt(messages: Sequence[_Message], total: int, room: int) -> list[str]:
    """Message lines within ``room`` characters, in order, with a marker for each gap
    (``total``: the number of messages summarised, shown or not)."""
    if not messages:
        return []
    if sum(m.cost(EXCERPT_WIDTHS[-1]) for m in messages) <= room:  # all fit at some width
        for width in EXCERPT_WIDTHS:
            if sum(m.cost(width) for m in messages) <= room:
                return [m.line(width) for m in messages]
    gap_cost = len(_gap(total)) + 1
    cheapest = min(len(m.role) for m in messages) + 8 + gap_cost
    firsts = [m for m in messages if m.role == "user"][:1]
    newest = messages[::-1]
    chosen: dict[int, _Message] = {}
    used = 0

    def take(candidates: Iterable[_Message]) -> bool:
        """Take what fits; ``False`` once nothing more can."""
        nonlocal used
        for message in candidates:
            if room - used < cheapest:
                return False
            if message.index in chosen:
                continue
            cost = message.cost(SELECTED_WIDTH) + gap_cost
            if used + cost <= room or not chosen:
                chosen[message.index] = message
                used += cost
        return True

    _ = (
        take(firsts)
        and take(newest[:LAST_EXCHANGES])
        and take(m for m in newest if _informative(m))
        and take(newest)
    )
    lines: list[str] = []
    previous = -1
    for message in messages:
        if message.index not in chosen:
            continue
        if message.index - previous > 1:
            lines.append(_gap(message.index - previous - 1))
        lines.append(message.line(SELECTED_WIDTH))
        previous = message.index
    if total - previous > 1:
        lines.append(_gap(total - previous - 1))
    return lines


def _labelled(label: str, value: str) -> str:
    """``label: value``, or the value alone when it already starts with the label."""
    return value if value.casefold().startswith(label.casefold()) else f"{label}: {value}"


def _covered(value: str, text: str) -> bool:
    return value.casefold() in text


def fallback_summary(
    entries: Sequence[Mapping[str, Any]],
    *,
    identifier_policy: str = "strict",
    budget_tokens: int | None = None,
    obligations: Sequence[ob.Obligation] | None = None,
) -> str:
    """The fallback summary of ``entries`` in about ``budget_tokens`` tokens (by default
    :func:`budget_tokens_for` their size). Goals, constraints, identifiers and pending tool
    calls are always kept, verbatim, even past the budget."""
    if budget_tokens is None:
        budget_tokens = budget_tokens_for(sum(entry_tokens(e) for e in entries))
    found = list(obligations) if obligations is not None else ob.extract_obligations(entries)
    room = budget_tokens * 4  # characters (tokens.estimate_tokens is len // 4)
    head: list[str] = []
    if identifier_policy == "strict":
        head.append(IDENTIFIER_INSTRUCTION)
    head.append(f"[Summary of {plural(len(entries), 'message')}]")

    always: list[str] = [
        _labelled(label, o.value)
        for kind, label in _LINE_LABELS
        if kind in _ALWAYS
        for o in found
        if o.kind == kind
    ]
    identifiers = [o.value for o in found if o.kind == ob.IDENTIFIER]
    ids_and_calls = [f"Identifiers: {', '.join(identifiers)}"] if identifiers else []
    pending = _pending_line(entries, found)
    if pending:
        ids_and_calls.append(pending)
    left = room - sum(len(line) + 1 for line in head + always + ids_and_calls)

    # The other obligations, by priority, within their share of what is left.
    labels = dict(_LINE_LABELS)
    share = int(max(left, 0) * OBLIGATION_SHARE)
    reach = ""
    if any(o.kind in _WITHIN_PREVIEW_ONLY for o in found):
        reach = "\n".join(preview(e.get("content")) for e in entries).casefold()
    picked: list[tuple[str, str, str]] = []  # (kind, value, line)
    for kind in _BUDGETED:
        candidates = [o.value for o in found if o.kind == kind]
        if kind in _WITHIN_PREVIEW_ONLY:
            candidates = [value for value in candidates if _covered(value, reach)]
        if kind == ob.QUESTION:
            candidates.reverse()  # the newest questions first
        taken = []
        for value in candidates:
            line = _labelled(labels[kind], value)
            if len(line) + 1 <= share:
                taken.append((kind, value, line))
                share -= len(line) + 1
        picked += taken[::-1] if kind == ob.QUESTION else taken
    left -= sum(len(line) + 1 for _, _, line in picked)

    messages = _messages(entries)
    excerpt = _excerpt(messages, len(entries), max(left, 0))
    # An obligation an excerpt line already shows verbatim is not listed twice; the room
    # it frees goes to the excerpt, unless the wider excerpt would no longer show it.
    shown = "\n".join(excerpt).casefold()
    repeated = [item for item in picked if _covered(item[1], shown)]
    if repeated:
        freed = sum(len(line) + 1 for _, _, line in repeated)
        wider = _excerpt(messages, len(entries), max(left, 0) + freed)
        wider_text = "\n".join(wider).casefold()
        if all(_covered(value, wider_text) for _, value, _ in repeated):
            excerpt = wider
        picked = [item for item in picked if item not in repeated]

    body: list[str] = []
    for kind, label in _LINE_LABELS:
        if kind in _ALWAYS:
            body += [_labelled(label, o.value) for o in found if o.kind == kind]
        else:
            body += [line for k, _, line in picked if k == kind]
        if kind == ob.USER_CONSTRAINT:  # identifiers and pending calls after the constraints
            body += ids_and_calls
    return "\n".join(head + body + excerpt)


def fallback_chunk_summary(
    entries: Sequence[Mapping[str, Any]],
    *,
    identifier_policy: str = "strict",
    budget_tokens: int | None = None,
) -> str:
    """The fallback summary of one chunk (budgeted on the chunk's own size)."""
    return fallback_summary(
        entries, identifier_policy=identifier_policy, budget_tokens=budget_tokens
    )


def merge_chunk_summaries(parts: Sequence[str]) -> str:
    """One part is its own summary; several are numbered under ``[Merged context summary]``.
    The identifier instruction leading fallback parts is said once, first."""
    instruction = any(part.startswith(IDENTIFIER_INSTRUCTION) for part in parts)
    bodies = [
        part[len(IDENTIFIER_INSTRUCTION) :].lstrip("\n")
        if part.startswith(IDENTIFIER_INSTRUCTION)
        else part
        for part in parts
    ]
    if len(parts) == 1:
        return parts[0]
    merged = "[Merged context summary]"
    for number, part in enumerate(bodies, start=1):
        merged += f"\n\n--- Part {number} ---\n{part}"
    return f"{IDENTIFIER_INSTRUCTION}\n{merged}" if instruction else merged
