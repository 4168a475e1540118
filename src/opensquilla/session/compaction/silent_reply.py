"""Silent-reply sanitising of the compactor's input (HEAD-FEATURES §5.5,
docs/semantics.md#silent-replies).

An agent runtime answers some turns with a control token instead of prose: ``NO_REPLY``
(nothing to say) or ``HEARTBEAT_OK`` (a heartbeat found nothing to do). The stored rows keep
what the model wrote; the compactor's input is cleaned here, at read time, so a summary never
carries protocol noise. Storage is never rewritten, and a row is never dropped: the input
stays one dict per live row, because the cut and the commit are positional.

What is cleaned, in our data model: ``content`` is a string (or ``None``): plain text, or a
JSON envelope (an object with a string ``text`` and/or ``display_text`` beside e.g.
``attachments``, docs/semantics.md#fallback-summary), whose text fields are cleaned and every
other key kept (the envelope is re-serialised only when a field changed); the
"segments" are the items of ``tool_calls``, where a runtime stores the ordered parts of a
turn. A dict with ``"type": "text"`` and a string ``"text"`` is a *text segment* (a fragment
of the visible reply, interleaved with tool activity); anything else (``tool_use``,
``tool_result``, a function call, a non-dict) is a *tool segment* and is always kept as it
is. The reply the segments carry is their texts joined with nothing in between, so a token
streamed as ``"NO_"`` + tool pair + ``"REPLY"`` is still a token. ``content`` and the segments
are cleaned separately, under the same rules; an absent ``tool_calls`` stays ``None``.

The rules (assistant rows only; every other row is returned unchanged):

* The row's run: ``turn_context.intent == "goal_continuation"`` is run kind ``goal`` with input
  mode ``system_event``; otherwise ``turn_context.run_kind`` (default ``default``) and
  ``turn_context.input_mode``.
* A text that is exactly a token once trimmed is suppressed, whatever the run: content ``""``,
  every text segment dropped.
* Mixed text is cleaned only for input mode ``system_event`` or run kinds ``goal`` and
  ``heartbeat``: whole token lines at the start or end of the text are removed (a token line
  may be Markdown-emphasised or backticked and indented by at most three spaces; a line inside
  fenced code never is one). Segments are projected alike (the deletions map back onto the
  fragments they came from), then a leading or trailing text segment that is on its own a
  silent reply is dropped.
* A heartbeat also loses its ``<think>`` blocks (an unclosed one runs to the end) and is
  suppressed when it is ``HEARTBEAT_OK`` (a whole word) at the start or the end plus at most 300
  characters of acknowledgement.
* Anywhere else a token is ordinary text (``"NO_REPLY\\nQuoted protocol example."`` in a
  default run stays as it is).

Cleaning is deletion only, and it is repeated until nothing changes, so sanitising twice is
sanitising once (a deletion can expose a new edge token). The lexical layer (spans, token lines,
fenced code) is ``silent_lines.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .silent_lines import (
    HEARTBEAT_OK,
    SILENT_REPLY_TOKENS,
    Spans,
    edge_window,
    span_text,
    trimmed,
    within,
)

HEARTBEAT_ACK_MAX_CHARS = 300
_MIXED_RUN_KINDS = frozenset({"goal", "heartbeat"})
_ENVELOPE_TEXTS = ("text", "display_text")
_THINK = re.compile(r"<think>.*?</think>|<think>.*\Z", re.DOTALL)
_ACK_AT_START = re.compile(rf"\A{HEARTBEAT_OK}(?!\w)")
_ACK_AT_END = re.compile(rf"(?<!\w){HEARTBEAT_OK}\Z")


@dataclass(frozen=True)
class _Run:
    """How a row's reply is read: its run kind and input mode."""

    kind: str
    input_mode: str | None

    @property
    def mixed(self) -> bool:
        """Whether tokens mixed with prose are protocol here (else only an exact token)."""
        return self.input_mode == "system_event" or self.kind in _MIXED_RUN_KINDS

    @property
    def heartbeat(self) -> bool:
        return self.kind == "heartbeat"


def _run_of(turn_context: object) -> _Run:
    context = turn_context if isinstance(turn_context, Mapping) else {}
    if context.get("intent") == "goal_continuation":
        return _Run("goal", "system_event")
    kind = context.get("run_kind")
    mode = context.get("input_mode")
    return _Run(
        kind if isinstance(kind, str) and kind else "default",
        mode if isinstance(mode, str) and mode else None,
    )


# -- one text ----------------------------------------------------------------------------------


def _is_short_ack(text: str) -> bool:
    for pattern in (_ACK_AT_START, _ACK_AT_END):
        match = pattern.search(text)
        if match is not None:
            rest = text[: match.start()] + text[match.end() :]
            if len(rest.strip()) <= HEARTBEAT_ACK_MAX_CHARS:
                return True
    return False


def _whole(text: str) -> Spans:
    return [(0, len(text))] if text else []


def _has_token(text: str) -> bool:
    return any(token in text for token in SILENT_REPLY_TOKENS)


def _clean_once(text: str, run: _Run) -> Spans | None:
    """One pass over ``text``: the spans it keeps, or ``None`` when it is a silent reply."""
    if text.strip() in SILENT_REPLY_TOKENS:
        return None
    spans = _whole(text)
    if run.heartbeat and "<think>" in text:
        thoughts = [match.span() for match in _THINK.finditer(text)]
        bounds = [0, *(edge for span in thoughts for edge in span), len(text)]
        spans = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
        spans = within(spans, [trimmed(span_text(text, spans))])
    if run.heartbeat:
        body = span_text(text, spans).strip()
        if body in SILENT_REPLY_TOKENS or _is_short_ack(body):
            return None
    if run.mixed:
        current = span_text(text, spans)
        window = edge_window(current) if _has_token(current) else None
        if window is not None:
            spans = within(spans, [window])
            if not span_text(text, spans).strip():
                return None
    return spans


def _clean(text: str, run: _Run) -> Spans | None:
    """The spans of ``text`` that survive cleaning repeated until nothing changes, or
    ``None`` when it is a silent reply."""
    spans = _whole(text)
    if not (run.heartbeat or _has_token(text)):
        return spans  # nothing to clean (the common case: plain prose)
    current = text
    while True:
        kept = _clean_once(current, run)
        if kept is None:
            return None
        if kept == _whole(current):
            return spans
        spans = within(spans, kept)
        current = span_text(text, spans)


def _clean_text(text: str, run: _Run) -> str:
    spans = _clean(text, run)
    return "" if spans is None else span_text(text, spans)


def _envelope(content: str) -> dict[str, Any] | None:
    """``content`` as a JSON envelope with a text field, else ``None``."""
    if not content.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    if isinstance(value, dict) and any(isinstance(value.get(k), str) for k in _ENVELOPE_TEXTS):
        return value
    return None


def _clean_content(content: str, run: _Run) -> str:
    if not (run.heartbeat or _has_token(content)):
        return content
    envelope = _envelope(content)
    if envelope is None:
        return _clean_text(content, run)
    changed = False
    for key in _ENVELOPE_TEXTS:
        value = envelope.get(key)
        if isinstance(value, str) and (cleaned := _clean_text(value, run)) != value:
            envelope[key] = cleaned
            changed = True
    return json.dumps(envelope, ensure_ascii=False) if changed else content


# -- segments ----------------------------------------------------------------------------------


def _text_of(segment: object) -> str | None:
    """The text of a text segment; ``None`` for a tool segment."""
    if isinstance(segment, Mapping) and segment.get("type") == "text":
        text = segment.get("text")
        if isinstance(text, str):
            return text
    return None


def _visible(segment: object) -> bool:
    text = _text_of(segment)
    return text is not None and bool(text.strip())


def _project(segments: list[Any], run: _Run) -> list[Any]:
    """The segments with the cleaning of their joined text mapped back onto each text
    segment (a fragment left empty is dropped)."""
    texts = [_text_of(segment) for segment in segments]
    joined = "".join(text for text in texts if text is not None)
    spans = _clean(joined, run)
    kept_spans = spans if spans is not None else []
    if spans is not None and spans == _whole(joined):
        return segments
    out: list[Any] = []
    offset = 0
    for segment, text in zip(segments, texts, strict=True):
        if text is None:
            out.append(segment)
            continue
        window = (offset, offset + len(text))
        offset += len(text)
        kept = "".join(
            joined[max(start, window[0]) : min(end, window[1])]
            for start, end in kept_spans
            if start < window[1] and end > window[0]
        )
        if kept == text:
            out.append(segment)
        elif kept:
            out.append({**segment, "text": kept})
    return out


def _drop_outer_silent(segments: list[Any], run: _Run) -> list[Any]:
    """Without the leading and trailing text segments that are each a silent reply (blank
    ones are looked past, a tool segment is not)."""
    out = list(segments)
    for from_end in (False, True):
        while True:
            order = range(len(out) - 1, -1, -1) if from_end else range(len(out))
            index = next((i for i in order if _visible(out[i])), None)
            if index is None or _clean(_text_of(out[index]) or "", run) is not None:
                break
            del out[index]
    return out


def _clean_segments(segments: list[Any], run: _Run) -> list[Any]:
    current = segments
    while True:
        cleaned = _project(current, run)
        if run.mixed:
            cleaned = _drop_outer_silent(cleaned, run)
        if cleaned == current:
            break
        current = cleaned
    if current is not segments and not any(_visible(segment) for segment in current):
        # A reply with nothing visible left carries no text segment at all.
        current = [segment for segment in current if _text_of(segment) is None]
    return current


# -- rows --------------------------------------------------------------------------------------


def sanitize_silent_reply(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of one compactor input dict with its silent-reply tokens cleaned (assistant
    rows only); ``entry`` and the objects it holds are never changed."""
    out = dict(entry)
    if entry.get("role") != "assistant":
        return out
    run = _run_of(entry.get("turn_context"))
    content = entry.get("content")
    if isinstance(content, str):
        out["content"] = _clean_content(content, run)
    segments = entry.get("tool_calls")
    if isinstance(segments, list):
        out["tool_calls"] = _clean_segments(segments, run)
    return out


def sanitize_silent_replies(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`sanitize_silent_reply` of each entry: one dict per entry, in order."""
    return [sanitize_silent_reply(entry) for entry in entries]
