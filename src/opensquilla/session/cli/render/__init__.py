"""Everything the commands print, in one place: one :class:`View` per result type.

A view holds the two ways a result is shown: ``data`` (what ``--json`` prints, strict
JSON through :func:`.text.emit_json`) and ``text`` (rich text and tables for people, every
stored value passed through :func:`.text.field` or :func:`.text.visible`). A command
computes its result and hands it to one view; the JSON-or-text choice lives in
:meth:`View.show` alone, and a dry run's preview in :func:`show_outcome` alone.

The submodules hold the views of one command group each (``render.sessions`` for the
``sessions`` commands, and so on); ``render.text`` holds the terminal-safe primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ...models.reports import DeletionPreview
from .text import emit_json, field, out, when

R = TypeVar("R")


@dataclass(frozen=True)
class View(Generic[R]):
    """How one result type is shown: ``data`` for ``--json``, ``text`` for people."""

    data: Callable[[R], object]
    text: Callable[[R], None]

    def show(self, result: R, as_json: bool) -> None:
        if as_json:
            emit_json(self.data(result))
        else:
            self.text(result)


def show_outcome(action: str, result: DeletionPreview | R, view: View[R], as_json: bool) -> None:
    """A deleting command's result: with ``--dry-run`` the preview of what ``action`` would
    delete (the same shape for every such command), else what it did, through ``view``."""
    if not isinstance(result, DeletionPreview):
        view.show(result, as_json)
    elif as_json:
        emit_json(
            {
                "dry_run": True,
                "sessions": result.session_keys,
                "rows": result.rows,
                "invalidated_context_states": result.invalidated_context_states,
            }
        )
    else:
        out.print(f"dry run: {action} would delete {len(result.sessions)} session(s)")
        for node in result.sessions:
            out.print(f"  {field(node.session_key)}  (updated {when(node.updated_at)})")
        for table, count in result.rows.items():
            out.print(f"  {table}: {count} row(s)")
        if result.invalidated_context_states:
            out.print(f"  context states invalidated: {result.invalidated_context_states}")
        out.print("nothing was changed")
