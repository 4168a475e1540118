"""The time prefix stamped on user messages (docs/semantics.md#time-prefix), e.g.
``[2026-11-29T13:36+00:00 Sun UTC]`` followed by a newline."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_STAMPED = re.compile(
    r"^\s*\[\d{4}-\d{2}-\d{2}T\d{2}:\d{2}[+-]\d{2}:\d{2} [A-Z][a-z]{2} [^\]\n]+\]"
)


def resolve_timezone(explicit: str | None = None) -> tzinfo:
    """``explicit``, then ``$OPENSQUILLA_TIMEZONE``, then ``$TZ``, then the local zone, then UTC."""
    for name in (explicit, os.environ.get("OPENSQUILLA_TIMEZONE"), os.environ.get("TZ")):
        if name and name.strip():
            try:
                return ZoneInfo(name.strip())
            except (ZoneInfoNotFoundError, ValueError):
                continue
    local = datetime.now().astimezone().tzinfo
    return local if local is not None else UTC


def format_prefix(moment: datetime) -> str:
    zone = moment.tzname() or time.strftime("%Z") or "UTC"
    return (
        f"[{moment.strftime('%Y-%m-%dT%H:%M')}{moment.strftime('%z')[:3]}:"
        f"{moment.strftime('%z')[3:]} {moment.strftime('%a')} {zone}]"
    )


def needs_prefix(content: str | None) -> bool:
    if not content or not content.strip():
        return False
    stripped = content.lstrip()
    return not stripped.startswith("{") and not _STAMPED.match(content)


def stamp(content: str, *, timezone: str | None = None, now: datetime | None = None) -> str:
    """``content`` with the time prefix line, unless it needs none (empty, stamped, JSON)."""
    if not needs_prefix(content):
        return content
    moment = (now or datetime.now(UTC)).astimezone(resolve_timezone(timezone))
    return f"{format_prefix(moment)}\n{content}"
