"""The ``search`` command's output: matching sessions, then message hits with snippets."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from ...models.search import SearchHit, SearchResults
from . import View
from .text import PREVIEW, field, out, record, visible, when

HIT_START = ">>>"
HIT_END = "<<<"


def highlight(snippet: str) -> str:
    """A snippet as rich text: its stored text escaped (one line), each ``>>>hit<<<``
    shown highlighted without the markers. Unpaired markers stay as text."""
    parts: list[str] = []
    rest = snippet
    while True:
        start = rest.find(HIT_START)
        end = rest.find(HIT_END, start + len(HIT_START)) if start >= 0 else -1
        if start < 0 or end < 0:
            parts.append(visible(rest, PREVIEW, one_line=True))
            return "".join(parts)
        parts.append(visible(rest[:start], PREVIEW, one_line=True))
        hit = visible(rest[start + len(HIT_START) : end], PREVIEW, one_line=True)
        parts.append(f"[bold reverse]{hit}[/bold reverse]")
        rest = rest[end + len(HIT_END) :]


def _hit_line(hit: SearchHit) -> str:
    where = " [dim](archived)[/dim]" if hit.archived else ""
    return (
        f"[bold]{field(hit.session_key)}[/bold] #{field(hit.id)} {field(hit.role)} "
        f"[dim]{when(hit.created_at)}[/dim]{where}"
    )


def _print_search(results: SearchResults) -> None:
    out.print(f"[bold]sessions[/bold] ({len(results.sessions)})")
    if results.sessions:
        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("key", overflow="fold", min_width=24)
        for name in ("title", "status", "updated"):
            table.add_column(name, overflow="fold")
        for node in results.sessions:
            title = node.display_name or node.derived_title or node.subject or node.label
            table.add_row(
                field(node.session_key),
                field(title or "-"),
                field(node.status),
                when(node.updated_at),
            )
        out.print(table)
    out.print(f"\n[bold]messages[/bold] ({len(results.messages)}, {field(results.path)} search)")
    for hit in results.messages:
        out.print(_hit_line(hit))
        out.print(f"  {highlight(hit.snippet)}")
    if not results.sessions and not results.messages:
        out.print("no matches")


def _search_data(results: SearchResults) -> dict[str, Any]:
    return {
        "path": results.path,
        "sessions": [record(node) for node in results.sessions],
        "messages": [hit.as_dict() for hit in results.messages],
    }


SEARCH: View[SearchResults] = View(_search_data, _print_search)
