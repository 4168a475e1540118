"""The ``sessions`` commands' output: the session listing and one session in full."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from ...errors import InvalidInputError
from ...models import (
    SessionContextState,
    SessionListCursor,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from ...support.jsontext import strict_json
from . import View
from .text import field, out, record, visible, when


@dataclass(frozen=True)
class SessionPage:
    """One page of ``sessions list``; ``next_cursor`` when more sessions follow."""

    nodes: list[SessionNode]
    limit: int
    offset: int
    next_cursor: SessionListCursor | None = None


@dataclass(frozen=True)
class TranscriptPageInfo:
    """What ``sessions show --limit`` says about its page: whether older messages exist
    and whether the canonical transcript is known to be whole."""

    has_more: bool
    canonical_complete: bool


@dataclass(frozen=True)
class SessionDetail:
    """Everything ``sessions show`` reads about one session (``page``: the transcript is
    one page of the canonical transcript)."""

    node: SessionNode
    canonical: bool
    transcript: list[TranscriptEntry]
    summaries: list[SessionSummary]
    states: list[SessionContextState]
    page: TranscriptPageInfo | None = None

    @property
    def older(self) -> str | None:
        """The ``--before`` of the next (older) page, when there is one."""
        if self.page is None or not self.page.has_more or not self.transcript:
            return None
        return encode_position(self.transcript[0])


def encode_position(entry: TranscriptEntry) -> str:
    """A transcript position as the CLI writes it: ``<created_at>:<id>``."""
    return f"{entry.created_at}:{entry.id}"


def decode_position(text: str) -> tuple[int, int]:
    """``<created_at>:<id>`` (two integers) as a page cursor."""
    created_at, sep, row_id = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return int(created_at), int(row_id)
    except ValueError:
        raise InvalidInputError(
            f"--before must be <created_at>:<id> (two integers), not {text[:80]!r}"
        ) from None


_LIST_COLUMNS = ("key", "status", "agent", "updated", "epoch", "tokens", "model")


def _print_sessions(page: SessionPage) -> None:
    """One line per session, columns aligned and never wrapped: a key is printed whole on
    its line (however long, whatever the terminal's width), so it can be copied."""
    if not page.nodes:
        out.print("no sessions")
        return
    rows = [
        [
            visible(node.session_key, None, one_line=True),
            field(node.status),
            field(node.agent_id),
            when(node.updated_at),
            field(node.epoch),
            field(node.total_tokens),
            field(node.model or "-"),
        ]
        for node in page.nodes
    ]
    lines = [[f"[bold]{name}[/bold]" for name in _LIST_COLUMNS], *rows]
    widths = [max(_shown_width(line[i]) for line in lines) for i in range(len(_LIST_COLUMNS))]
    for line in lines:
        cells = zip(line, widths, strict=True)
        padded = [cell + " " * (width - _shown_width(cell)) for cell, width in cells]
        out.print("  ".join(padded).rstrip(), no_wrap=True, overflow="ignore", crop=False)
    if page.next_cursor is not None:
        out.print(f"more: --cursor {field(shlex.quote(page.next_cursor.encode()))}")


def _shown_width(markup: str) -> int:
    """The terminal cells a markup string takes once printed."""
    return Text.from_markup(markup).cell_len


def entry_lines(entry: TranscriptEntry) -> list[str]:
    """One message as text: tool calls and tool results folded to one line each."""
    head = f"[bold]#{field(entry.id)} {field(entry.role)}[/bold] "
    head += f"[dim]{when(entry.created_at)}[/dim]"
    if entry.role == "tool" or entry.tool_call_id:
        first = (entry.content or "").splitlines()[0] if entry.content else ""
        return [
            f"{head} ↩ {field(entry.tool_call_id or '-')}: {visible(first, 100, one_line=True)}"
        ]
    lines = [head]
    if entry.content:
        lines.append(visible(entry.content))
    for call in entry.tool_calls or []:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        shown = arguments if isinstance(arguments, str) else strict_json(arguments, None)
        lines.append(
            f"  ↳ {field(name or 'tool call')}({visible(shown, 80, one_line=True)}) "
            f"[dim]{field(call.get('id', '') if isinstance(call, dict) else '')}[/dim]"
        )
    return lines


def print_transcript(entries: list[TranscriptEntry]) -> None:
    for entry in entries:
        for line in entry_lines(entry):
            out.print(line)


def _print_session(detail: SessionDetail) -> None:
    node = detail.node
    fields = Table.grid(padding=(0, 2))
    for name, value in record(node).items():
        if value not in (None, "", {}, []):
            shown = value if isinstance(value, str) else strict_json(value, None)
            if name.endswith("_at") and isinstance(value, int) and not isinstance(value, bool):
                shown = f"{value} ({when(value)})"
            fields.add_row(name, field(shown))
    out.print(f"[bold]session {field(node.session_key)}[/bold]")
    out.print(fields)
    view = "canonical transcript" if detail.canonical else "live transcript"
    if detail.page is not None:
        whole = "" if detail.page.canonical_complete else ", not known to be complete"
        view = f"canonical transcript page{whole}"
    out.print(f"\n[bold]{view}[/bold] ({len(detail.transcript)} messages)")
    print_transcript(detail.transcript)
    if detail.older is not None:
        out.print(f"older: --before {field(detail.older)}")
    out.print(f"\n[bold]summaries[/bold] ({len(detail.summaries)})")
    for summary in detail.summaries:
        out.print(
            f"#{field(summary.id)} index {field(summary.compaction_index)} "
            f"{field(summary.compaction_id)}: "
            f"removed {field(summary.removed_count)}, kept {field(summary.kept_count)}, "
            f"coverage {field(summary.coverage_status)}, "
            f"flush {field(summary.flush_receipt_status)}, "
            f"through #{field(summary.covered_through_id)}"
        )
        out.print(visible(summary.summary_text, 400))
    out.print(f"\n[bold]context states[/bold] ({len(detail.states)})")
    for state in detail.states:
        validity = "valid" if state.valid else f"invalid ({field(state.invalid_reason)})"
        out.print(
            f"#{field(state.id)} {field(state.provider)}/{field(state.state_kind)} "
            f"through #{field(state.covered_through_id)}, {validity}"
        )


SESSIONS: View[SessionPage] = View(
    lambda page: {
        "sessions": [record(node) for node in page.nodes],
        "limit": page.limit,
        "offset": page.offset,
        "next_cursor": page.next_cursor.encode() if page.next_cursor is not None else None,
    },
    _print_sessions,
)
SESSION: View[SessionDetail] = View(
    lambda detail: {
        "session": record(detail.node),
        "transcript_view": "canonical" if detail.canonical else "live",
        "transcript": [record(entry) for entry in detail.transcript],
        **(
            {
                "page": {
                    "has_more": detail.page.has_more,
                    "older": detail.older,
                    "canonical_complete": detail.page.canonical_complete,
                }
            }
            if detail.page is not None
            else {}
        ),
        "summaries": [record(summary) for summary in detail.summaries],
        "context_states": [record(state) for state in detail.states],
    },
    _print_session,
)
