"""The lexical layer of silent-reply sanitising (``silent_reply.py``): kept parts of a text
as spans of offsets, and the whole token lines at a text's edges (Markdown emphasis and
fenced code considered). Pure functions over strings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

NO_REPLY = "NO_REPLY"
HEARTBEAT_OK = "HEARTBEAT_OK"
SILENT_REPLY_TOKENS = frozenset({NO_REPLY, HEARTBEAT_OK})

# Longest first: "**x**" is emphasis around x, not "*" around "*x*".
_EMPHASIS = ("**", "__", "~~", "*", "_", "`")
_MAX_INDENT = 3  # four columns make an indented code block
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")

# Kept parts of a text, as ``(start, end)`` offsets into the original, in order.
Spans = list[tuple[int, int]]


# -- spans -----------------------------------------------------------------------------------


def span_text(source: str, spans: Spans) -> str:
    return "".join(source[start:end] for start, end in spans)


def within(spans: Spans, windows: Iterable[tuple[int, int]]) -> Spans:
    """The parts of ``spans`` that make up the given windows of their joined text (windows
    in joined-text offsets, in order, not overlapping)."""
    out: Spans = []
    for low, high in windows:
        offset = 0
        for start, end in spans:
            length = end - start
            first, last = max(low - offset, 0), min(high - offset, length)
            if first < last:
                if out and out[-1][1] == start + first:
                    out[-1] = (out[-1][0], start + last)
                else:
                    out.append((start + first, start + last))
            offset += length
    return out


def trimmed(text: str) -> tuple[int, int]:
    """The window of ``text`` without its leading and trailing whitespace."""
    start = len(text) - len(text.lstrip())
    return start, max(start, len(text.rstrip()))


# -- token lines -----------------------------------------------------------------------------


def _is_token_line(line: str) -> bool:
    """A whole line that says only a token: up to three spaces of indent, optionally
    wrapped in Markdown emphasis or backticks (never a fence's triple backticks)."""
    body = line.rstrip("\r\n")
    indent = body[: len(body) - len(body.lstrip(" \t"))]
    if "\t" in indent or len(indent) > _MAX_INDENT:
        return False
    candidate = body.strip()
    while candidate not in SILENT_REPLY_TOKENS:
        if candidate.startswith("```") or candidate.endswith("```"):
            return False
        for mark in _EMPHASIS:
            if (
                len(candidate) > 2 * len(mark)
                and candidate.startswith(mark)
                and candidate.endswith(mark)
            ):
                candidate = candidate[len(mark) : -len(mark)].strip()
                break
        else:
            return False
    return True


def _fenced(lines: Sequence[str]) -> list[bool]:
    """Which lines belong to fenced code (the fences included; an unclosed fence runs to
    the end)."""
    mask: list[bool] = []
    fence: str | None = None
    for line in lines:
        body = line.rstrip("\r\n")
        if fence is None:
            opening = _FENCE_OPEN.match(body)
            fence = opening.group(1) if opening else None
            mask.append(fence is not None)
            continue
        mask.append(True)
        closing = rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*"
        if re.fullmatch(closing, body):
            fence = None
    return mask


def edge_window(text: str) -> tuple[int, int] | None:
    """The window of ``text`` left once its leading and trailing token lines (and the blank
    lines between them and the body) are removed; ``None`` when there are none."""
    matches = list(_LINE.finditer(text))
    lines = [match.group() for match in matches]
    fenced = _fenced(lines)

    def scan(order: Iterable[int]) -> tuple[bool, int | None]:
        """Whether token lines came first along ``order``, and the first other line."""
        found = False
        for index in order:
            if not lines[index].strip():
                continue
            if fenced[index] or not _is_token_line(lines[index]):
                return found, index
            found = True
        return found, None

    leading, first_body = scan(range(len(lines)))
    if first_body is None:
        return (len(text), len(text)) if leading else None
    trailing, last_body = scan(range(len(lines) - 1, first_body - 1, -1))
    if not (leading or trailing):
        return None
    start = matches[first_body].start() if leading else 0
    end = len(text)
    if trailing:
        assert last_body is not None  # the scan back stops at the first body line at latest
        end = matches[last_body].start() + len(lines[last_body].rstrip("\r\n"))
    return start, end
