"""Strict JSON text for people and files: what ``json.dumps`` gives for ordinary values,
without its two failure modes on stored data.

* Depth: stored JSON may be nested as deeply as the store accepts, deeper than Python's
  recursive encoders go, so the encoder here keeps its own stack.
* Strictness: non-finite floats (which ``json.dumps`` writes as bare ``NaN``) become the
  strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, and every control character (C1,
  line separators and bidi overrides too) is escaped, so no output can drive a terminal.

Used by the CLI's ``--json`` output and by reset archive files.
"""

from __future__ import annotations

import math
import re
from typing import Any, cast

TERMINAL_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""A regex character-class body: every character that can move or restyle a terminal."""

_JSON_UNSAFE = re.compile(f'["\\\\{TERMINAL_CONTROLS}\\t\\n\ud800-\udfff]')
_JSON_SHORT = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}
_END = object()


def _json_string(text: str) -> str:
    """A JSON string literal: every control character (C1, separators and bidi overrides
    too) and unpaired surrogate escaped, so no output can drive a terminal."""

    def one(match: re.Match[str]) -> str:
        char = match.group()
        return _JSON_SHORT.get(char) or f"\\u{ord(char):04x}"

    return '"' + _JSON_UNSAFE.sub(one, text) + '"'


def _json_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isfinite(value):
            return float.__repr__(value)
        return '"NaN"' if math.isnan(value) else ('"Infinity"' if value > 0 else '"-Infinity"')
    return _json_string(str(value))


def _json_key(name: Any) -> str:
    if isinstance(name, str):
        return _json_string(name)
    return _json_string(_json_scalar(name).strip('"'))


def strict_json(value: Any, indent: int | None = 2) -> str:
    """``value`` as strict JSON (what ``json.dumps(value, indent=indent)`` gives for
    ordinary values), without recursion: stored JSON may be nested as deeply as the store
    accepts, deeper than Python's encoders go. Non-finite floats become ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; other non-JSON values their ``str``."""
    out: list[str] = []
    stack: list[list[Any]] = []  # [items, is_object, depth, first]

    def begin(item: Any, depth: int) -> None:
        if isinstance(item, dict):
            if not item:
                out.append("{}")
                return
            out.append("{")
            stack.append([iter(item.items()), True, depth + 1, True])
        elif isinstance(item, list | tuple):
            if not item:
                out.append("[]")
                return
            out.append("[")
            stack.append([iter(item), False, depth + 1, True])
        else:
            out.append(_json_scalar(item))

    begin(value, 0)
    while stack:
        frame = stack[-1]
        items, is_object, depth, first = frame
        item = next(items, _END)
        if item is _END:
            stack.pop()
            closing = "}" if is_object else "]"
            out.append(closing if indent is None else "\n" + " " * (indent * (depth - 1)) + closing)
            continue
        if indent is not None:
            out.append(("\n" if first else ",\n") + " " * (indent * depth))
        elif not first:
            out.append(", ")
        frame[3] = False
        if is_object:
            name, inner = cast(tuple[Any, Any], item)
            out.append(_json_key(name) + ": ")
            begin(inner, depth)
        else:
            begin(item, depth)
    return "".join(out)
