"""Stored text made safe to show, and the two consoles it is shown on.

Stored text is shown, never obeyed: a key, a status or a message can hold rich markup, ESC
sequences, carriage returns, bells or bidirectional overrides, and printing them raw would
let the store restyle, rewrite or hide what the operator reads. Everything the commands
print about stored data goes through :func:`visible` or :func:`field`; ``--json`` output
goes through :func:`emit_json` (strict JSON, controls as ``\\u`` escapes).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from ...support.jsontext import TERMINAL_CONTROLS, strict_json

PREVIEW = 2000  # characters of a long stored text shown before it is cut
# Characters a terminal would act on rather than show: C0 and C1 controls (ESC, CSI, BEL,
# CR, backspace...), DEL, line and paragraph separators, bidirectional overrides.
_CONTROL = re.compile(f"[{TERMINAL_CONTROLS}]")
_CONTROL_OR_BREAK = re.compile(f"[\t\n{TERMINAL_CONTROLS}]")
_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

# emoji=False: ":b:" in a key is text, not an emoji code.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def _show_control(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def no_controls(text: str, *, keep_line_breaks: bool = True) -> str:
    """``text`` with every terminal control shown as an escape (and, unless
    ``keep_line_breaks``, newlines and tabs too)."""
    return (_CONTROL if keep_line_breaks else _CONTROL_OR_BREAK).sub(_show_control, text)


def plain(text: object | None, limit: int | None = PREVIEW, *, one_line: bool = False) -> str:
    """Text safe for a terminal when printed without markup (a ``rich.text.Text``):
    control characters shown as escapes (with ``one_line``, newlines and tabs too), cut
    after ``limit`` characters."""
    if text is None:
        return ""
    shown = no_controls(str(text), keep_line_breaks=not one_line)
    if limit is not None and len(shown) > limit:
        shown = shown[:limit] + f"… ({len(shown) - limit} more characters)"
    return shown


def visible(text: object | None, limit: int | None = PREVIEW, *, one_line: bool = False) -> str:
    """:func:`plain` text for a string printed with markup: rich markup escaped."""
    return escape(plain(text, limit, one_line=one_line))


def field(text: object | None) -> str:
    """A short stored value (a key, a status, an id) for one line or one table cell."""
    return visible(text, 200, one_line=True)


def when(ms: int | None) -> str:
    """A stored millisecond time as UTC, or the number itself when it is no date (a legacy
    row can hold any integer, or something else)."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        return field(ms)


def emit_json(data: Any) -> None:
    """``--json`` output: strict JSON on stdout (``support.jsontext.strict_json``)."""
    typer.echo(strict_json(data))


def record(stored: BaseModel) -> dict[str, Any]:
    """A stored record's fields as they are. Not ``model_dump``: pydantic's serialiser
    refuses values nested deeper than its own limit, which the store accepts."""
    return {name: getattr(stored, name) for name in type(stored).model_fields}
