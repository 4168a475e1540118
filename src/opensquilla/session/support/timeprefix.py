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


# The zone each setting ``(explicit, $OPENSQUILLA_TIMEZONE, $TZ)`` named, read again
# whenever a setting changes; ``None`` is the local zone. Only a resolution where no name
# was refused is kept, so a refused name is tried again as before (a zone installed later).
_NAMED: dict[tuple[str | None, str | None, str | None], str | None] = {}
_NAMED_LIMIT = 64


def _named_zone(explicit: str | None) -> tzinfo | None:
    """The first of ``explicit``, ``$OPENSQUILLA_TIMEZONE``, ``$TZ`` that names a zone, or
    ``None`` (the local zone)."""
    settings = (explicit, os.environ.get("OPENSQUILLA_TIMEZONE"), os.environ.get("TZ"))
    if explicit is None or type(explicit) is str:
        try:
            name = _NAMED[settings]
        except KeyError:
            pass
        else:
            # ZoneInfo keeps its own cache: the same object as before, unless it was cleared
            return None if name is None else ZoneInfo(name)
    refused = False
    for setting in settings:
        if setting and setting.strip():
            try:
                zone = ZoneInfo(setting.strip())
            except (ZoneInfoNotFoundError, ValueError):
                refused = True
                continue
            _remember(settings, setting.strip(), refused)
            return zone
    _remember(settings, None, refused)
    return None


def _remember(
    settings: tuple[str | None, str | None, str | None], name: str | None, refused: bool
) -> None:
    if refused or not (settings[0] is None or type(settings[0]) is str):
        return
    if len(_NAMED) >= _NAMED_LIMIT:
        _NAMED.clear()
    _NAMED[settings] = name


def zone_problem(name: object) -> str | None:
    """Why ``name`` cannot be an explicit time zone setting (``None``: it can): it must be
    an IANA zone name this machine knows (``"UTC"``, ``"Europe/Berlin"``). An environment
    variable naming no zone is passed over, as the local machine's setting may be; a zone
    the caller names explicitly is not, or a typo would silently stamp another zone."""
    if name is None:
        return None
    if not isinstance(name, str):
        return f"must be a time zone name (a str) or None, not {type(name).__name__}"
    if not name.strip():
        return "must be a time zone name such as 'UTC' or 'Europe/Berlin', not blank"
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        shown = (
            name if len(name) <= 64 and name.isprintable() else f"a str of {len(name)} characters"
        )
        return f"{shown!r} is not a time zone this machine knows (an IANA name such as 'UTC')"
    return None


def resolve_timezone(explicit: str | None = None) -> tzinfo:
    """``explicit``, then ``$OPENSQUILLA_TIMEZONE``, then ``$TZ``, then the local zone, then UTC."""
    zone = _named_zone(explicit)
    return zone if zone is not None else _local_zone()


def _local_zone() -> tzinfo:
    local = datetime.now().astimezone().tzinfo
    return local if local is not None else UTC


def format_prefix(moment: datetime) -> str:
    zone = moment.tzname() or time.strftime("%Z") or "UTC"
    # One strftime (each costs a few microseconds): the fields hold no space but the
    # weekday's name may, in some locale, so it comes last.
    clock, offset, day = moment.strftime("%Y-%m-%dT%H:%M %z %a").split(" ", 2)
    return f"[{clock}{offset[:3]}:{offset[3:]} {day} {zone}]"


def needs_prefix(content: str | None) -> bool:
    if not content or not content.strip():
        return False
    stripped = content.lstrip()
    return not stripped.startswith("{") and not _STAMPED.match(content)


def stamp(content: str, *, timezone: str | None = None, now: datetime | None = None) -> str:
    """``content`` with the time prefix line, unless it needs none (empty, stamped, JSON)."""
    if not needs_prefix(content):
        return content
    zone = _named_zone(timezone)
    if zone is None and now is None:
        # The local zone at this moment: what resolve_timezone's local zone of "now" is,
        # without reading the clock twice.
        moment = datetime.now(UTC).astimezone()
    else:
        moment = (now or datetime.now(UTC)).astimezone(zone if zone is not None else _local_zone())
    return f"{format_prefix(moment)}\n{content}"
