"""The text that replays compaction summaries in a model request (HEAD-FEATURES §5.8).

:func:`format_compaction_summary_context` numbers the distinct summaries, oldest first,
under one header, and keeps the whole within :data:`MAX_REPLAY_CHARS` characters. Over
that cap the newest summaries are budgeted first (the output stays chronological):

* a *structured* summary (the rendering upstream stores: a ``[Structured Compaction
  Summary]`` line, then ``Title:`` sections, each after a blank line, titles in
  :data:`SECTION_TITLES` order) keeps whole sections in :data:`SECTION_PRIORITY` order; a
  section that does not fit reads :data:`SECTION_OMITTED`, never a cut value;
* any other (legacy) summary keeps its first third and the rest from its end, cut at
  whitespace, around :data:`LEGACY_OMITTED`;
* once a summary cannot be kept even so, it and every older one are left out, announced by
  one line saying how many.

The engine's own summaries are plain text, so they replay as legacy text, except under
verified backfill (:mod:`.coverage`), which renders its payload as a structured summary;
other structured ones come from upstream databases or callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

HEADER = "[Compacted Session Summaries]"
STRUCTURED_HEADER = "[Structured Compaction Summary]"
MAX_REPLAY_CHARS = 16_000
SECTION_OMITTED = "[Omitted from request replay to fit the context budget.]"
LEGACY_OMITTED = "[Legacy compaction summary text omitted in the middle to fit the context budget.]"

#: Section titles in the order a structured summary renders them (the fields of the
#: structured payload, plus upstream's commands and pending-id sections).
SECTION_TITLES = (
    "Goal",
    "Current Status",
    "Next Action",
    "Completed Steps",
    "Open Steps",
    "Files and Artifacts",
    "Tool Results To Remember",
    "Decisions and Rationale",
    "Known Failures",
    "Executed Commands and Tests",
    "Pending Tool and Approval IDs",
    "Important Identifiers",
    "Constraints and Preferences",
    "Do Not Repeat",
    "Unresolved Questions",
    "Critical Carry Forward",
)
#: The order in which sections are kept when a summary must shrink.
SECTION_PRIORITY = (
    "Goal",
    "Next Action",
    "Pending Tool and Approval IDs",
    "Critical Carry Forward",
    "Constraints and Preferences",
    "Current Status",
    "Open Steps",
    "Known Failures",
    "Unresolved Questions",
    "Important Identifiers",
    "Decisions and Rationale",
    "Tool Results To Remember",
    "Files and Artifacts",
    "Do Not Repeat",
    "Completed Steps",
    "Executed Commands and Tests",
)
_TITLE_RANK = {title: rank for rank, title in enumerate(SECTION_TITLES)}
_WHITESPACE = re.compile(r"\s")


def omitted_summaries_line(count: int) -> str:
    noun = "summary" if count == 1 else "summaries"
    return (
        f"[Omitted {count} earlier compaction {noun} from request replay to fit the "
        "context budget.]"
    )


def _distinct(texts: Iterable[str | None]) -> list[str]:
    """The stripped, non-empty texts, each once (its first occurrence), in order."""
    return list(dict.fromkeys(stripped for text in texts if (stripped := (text or "").strip())))


def _render(blocks: Mapping[int, str], omitted: int) -> str:
    """The header, the omission line (``omitted`` > 0), then the blocks by number."""
    parts = [omitted_summaries_line(omitted)] if omitted else []
    parts += [blocks[number] for number in sorted(blocks)]
    return f"{HEADER}\n" + "\n\n".join(parts)


def split_sections(text: str) -> list[tuple[str, str]] | None:
    """``[(title, "Title:\\nbody"), ...]`` of a structured summary; ``None`` when ``text`` is
    not one or its sections are ambiguous (a title twice or out of order, text before the
    first section): such a summary is never cut inside."""
    lines = text.split("\n")
    if lines[0] != STRUCTURED_HEADER:
        return None
    starts: list[tuple[int, str]] = []
    for index in range(1, len(lines)):
        line = lines[index]
        title = line[:-1]
        if not line.endswith(":") or title not in _TITLE_RANK:
            continue
        if index > 1 and lines[index - 1].strip():
            continue  # a value line that happens to look like a title
        if starts and _TITLE_RANK[title] <= _TITLE_RANK[starts[-1][1]]:
            return None
        starts.append((index, title))
    first = starts[0][0] if starts else len(lines)
    if any(line.strip() for line in lines[1:first]):
        return None
    ends = [start for start, _ in starts[1:]] + [len(lines)]
    return [
        (title, "\n".join(lines[start:end]).rstrip())
        for (start, title), end in zip(starts, ends, strict=True)
    ]


def _pack_sections(sections: list[tuple[str, str]], room: int) -> str | None:
    """The structured summary with whole sections, by priority, within ``room`` characters
    (the others replaced by :data:`SECTION_OMITTED`); ``None`` if even that is too long."""
    shown = {title: f"{title}:\n{SECTION_OMITTED}" for title, _ in sections}

    def render() -> str:
        body = "\n\n".join(shown[title] for title, _ in sections)
        return f"{STRUCTURED_HEADER}\n\n{body}" if body else STRUCTURED_HEADER

    packed = render()
    if len(packed) > room:
        return None
    full = dict(sections)
    for title in SECTION_PRIORITY:
        if title not in full:
            continue
        omitted, shown[title] = shown[title], full[title]
        candidate = render()
        if len(candidate) <= room:
            packed = candidate
        else:
            shown[title] = omitted
    return packed


def _head(text: str, room: int) -> str:
    """At most ``room`` leading characters, ending at whitespace when one lies in the
    second half of them."""
    piece = text[:room]
    if len(text) > room:
        breaks = [match.start() for match in _WHITESPACE.finditer(piece)]
        if breaks and breaks[-1] >= room // 2:
            piece = piece[: breaks[-1]]
    return piece.rstrip()


def _tail(text: str, room: int) -> str:
    """At most ``room`` trailing characters, starting after whitespace when one lies in the
    first half of them."""
    piece = text[len(text) - room :] if room < len(text) else text
    if len(text) > room:
        match = _WHITESPACE.search(piece)
        if match is not None and match.start() < room // 2:
            piece = piece[match.end() :]
    return piece.lstrip()


def _pack_legacy(text: str, room: int) -> str | None:
    """``text`` within ``room`` characters: its first third and its end around
    :data:`LEGACY_OMITTED`; ``None`` when not even that fits."""
    if len(text) <= room:
        return text
    separator = f"\n{LEGACY_OMITTED}\n"
    usable = room - len(separator)
    if usable < 2:
        return None
    head_room = max(1, usable // 3)
    head, tail = _head(text, head_room), _tail(text, usable - head_room)
    if not head and not tail:
        return None
    return f"{head}{separator}{tail}"


def _pack(text: str, room: int) -> str | None:
    if text.startswith(STRUCTURED_HEADER):
        sections = split_sections(text)
        return None if sections is None else _pack_sections(sections, room)
    return _pack_legacy(text, room)


def format_compaction_summary_context(texts: Iterable[str | None]) -> str | None:
    """The replay text of compaction summaries ``texts`` (oldest first): stripped, empty and
    repeated ones dropped, ``None`` when none is left, else ``[Compacted Session
    Summaries]`` and one ``[Summary i]`` block each, separated by blank lines, at most
    :data:`MAX_REPLAY_CHARS` characters (see the module docstring for what gives way)."""
    distinct = _distinct(texts)
    if not distinct:
        return None
    blocks = {number: f"[Summary {number}]\n{text}" for number, text in enumerate(distinct, 1)}
    whole = _render(blocks, 0)
    if len(whole) <= MAX_REPLAY_CHARS:
        return whole
    kept: dict[int, str] = {}
    omitted = 0
    for number in range(len(distinct), 0, -1):
        older = number - 1  # announced as omitted while this one is being fitted
        if len(_render({**kept, number: blocks[number]}, older)) <= MAX_REPLAY_CHARS:
            kept[number] = blocks[number]
            continue
        prefix = f"[Summary {number}]\n"
        room = MAX_REPLAY_CHARS - len(_render({**kept, number: prefix}, older))
        packed = _pack(distinct[number - 1], room)
        if packed is not None:
            kept[number] = prefix + packed
            continue
        omitted = number
        break
    return _render(kept, omitted)
