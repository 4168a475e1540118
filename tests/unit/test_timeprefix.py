"""The time prefix stamped on user messages (SEMANTICS §5).

The model reads this line to know "now", so its format is fixed; and it must never be
stamped twice, nor onto empty or JSON content.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import pytest

from opensquilla.session.support import timeprefix
from opensquilla.session.support.timeprefix import (
    format_prefix,
    needs_prefix,
    resolve_timezone,
    stamp,
)

NOW = datetime(2026, 11, 29, 13, 36, 45, tzinfo=UTC)  # a Sunday
PREFIX_SHAPE = re.compile(
    r"^\[\d{4}-\d{2}-\d{2}T\d{2}:\d{2}[+-]\d{2}:\d{2} [A-Z][a-z]{2} [^\]]+\]\n"
)


@pytest.fixture(autouse=True)
def _no_zone_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's zone settings must not leak into these expectations."""
    monkeypatch.delenv("OPENSQUILLA_TIMEZONE", raising=False)
    monkeypatch.delenv("TZ", raising=False)


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("UTC", "[2026-11-29T13:36+00:00 Sun UTC]\n"),
        ("Asia/Kolkata", "[2026-11-29T19:06+05:30 Sun IST]\n"),
        ("America/New_York", "[2026-11-29T08:36-05:00 Sun EST]\n"),
        ("Asia/Kathmandu", "[2026-11-29T19:21+05:45 Sun +0545]\n"),
        ("Pacific/Kiritimati", "[2026-11-30T03:36+14:00 Mon +14]\n"),
    ],
)
def test_prefix_format(zone: str, expected: str) -> None:
    """Minutes precision, offset with a colon, weekday, zone abbreviation, then a newline."""
    stamped = stamp("hello", timezone=zone, now=NOW)
    assert stamped == expected + "hello"
    assert PREFIX_SHAPE.match(stamped)


def test_format_prefix_of_an_aware_datetime() -> None:
    moment = datetime(2026, 7, 4, 9, 5, tzinfo=ZoneInfo("Europe/Berlin"))
    assert format_prefix(moment) == "[2026-07-04T09:05+02:00 Sat CEST]"


@pytest.mark.parametrize("content", ["", " ", "\n\t  \n"])
def test_empty_or_blank_content_is_not_stamped(content: str) -> None:
    assert not needs_prefix(content)
    assert stamp(content, timezone="UTC", now=NOW) == content


def test_none_needs_no_prefix() -> None:
    assert not needs_prefix(None)


@pytest.mark.parametrize(
    "content",
    [
        "[2026-11-29T13:36+00:00 Sun UTC]\nalready",
        "  [2025-01-01T00:00-08:00 Wed PST] inline",
        "[2026-11-29T19:06+05:30 Sun IST]\n",
    ],
)
def test_already_stamped_content_is_left_alone(content: str) -> None:
    """Re-sending a stamped message must not grow a second prefix."""
    assert not needs_prefix(content)
    assert stamp(content, timezone="UTC", now=NOW) == content


@pytest.mark.parametrize("content", ['{"tool": "x"}', '  \n{"a": 1}', "{"])
def test_json_content_is_left_alone(content: str) -> None:
    """Content starting with '{' (after whitespace) is structured; a prefix would break it."""
    assert stamp(content, timezone="UTC", now=NOW) == content


@pytest.mark.parametrize(
    "content",
    ["[not a stamp] hi", "hi [2026-11-29T13:36+00:00 Sun UTC]", "[2026-11-29 13:36] x", "[{}]"],
)
def test_look_alikes_are_stamped(content: str) -> None:
    """Only a real prefix at the start counts; a bracket or a stamp later on does not."""
    assert stamp(content, timezone="UTC", now=NOW) == "[2026-11-29T13:36+00:00 Sun UTC]\n" + content


def test_stamping_twice_is_stable() -> None:
    once = stamp("hello", timezone="Asia/Kolkata", now=NOW)
    assert stamp(once, timezone="UTC", now=NOW) == once


def test_zone_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit zone, then OPENSQUILLA_TIMEZONE, then TZ; unknown names are skipped."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "Europe/Paris")
    assert resolve_timezone("America/Chicago") == ZoneInfo("America/Chicago")
    assert resolve_timezone(None) == ZoneInfo("Europe/Paris")
    assert resolve_timezone("Not/AZone") == ZoneInfo("Europe/Paris")
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "  ")
    assert resolve_timezone(None) == ZoneInfo("Asia/Tokyo")
    assert stamp("x", now=NOW).startswith("[2026-11-29T22:36+09:00 Sun JST]\n")


def _format_prefix_before(moment: datetime) -> str:
    """The format as it was written first (four strftime calls): the reference."""
    zone = moment.tzname() or time.strftime("%Z") or "UTC"
    return (
        f"[{moment.strftime('%Y-%m-%dT%H:%M')}{moment.strftime('%z')[:3]}:"
        f"{moment.strftime('%z')[3:]} {moment.strftime('%a')} {zone}]"
    )


MOMENTS = [
    NOW,
    datetime(2026, 3, 29, 1, 30, tzinfo=UTC),  # Europe's spring change
    datetime(2026, 10, 25, 0, 59, 59, tzinfo=UTC),
    datetime(1900, 1, 1, 12, 0, tzinfo=UTC),  # local mean times: offsets with seconds
    datetime(1850, 6, 15, 23, 59, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, tzinfo=UTC),
]


def test_format_prefix_is_the_reference_format_in_every_zone() -> None:
    """One strftime builds the same text as four did, in every zone the machine knows, at
    moments whose offsets have seconds or fall on a change, and for a naive datetime."""
    zones = sorted(available_timezones())
    assert len(zones) > 300
    for name in zones:
        zone = ZoneInfo(name)
        for moment in MOMENTS:
            local = moment.astimezone(zone)
            assert format_prefix(local) == _format_prefix_before(local), (name, moment)
    naive = datetime(2026, 11, 29, 13, 36)
    assert format_prefix(naive) == _format_prefix_before(naive)


def test_stamp_follows_zone_settings_changed_between_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resolved zone is remembered by the settings' values: a changed variable (or
    explicit zone) is honoured on the very next call."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert stamp("x", now=NOW).startswith("[2026-11-29T22:36+09:00 Sun JST]\n")
    monkeypatch.setenv("TZ", "America/New_York")
    assert stamp("x", now=NOW).startswith("[2026-11-29T08:36-05:00 Sun EST]\n")
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "Asia/Kolkata")
    assert stamp("x", now=NOW).startswith("[2026-11-29T19:06+05:30 Sun IST]\n")
    assert stamp("x", timezone="UTC", now=NOW).startswith("[2026-11-29T13:36+00:00 Sun UTC]\n")
    monkeypatch.delenv("OPENSQUILLA_TIMEZONE")
    assert stamp("x", now=NOW).startswith("[2026-11-29T08:36-05:00 Sun EST]\n")
    assert resolve_timezone(None) == ZoneInfo("America/New_York")


def test_a_refused_zone_name_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that did not resolve is not remembered as refused: once it resolves (a zone
    installed meanwhile), it is used."""
    real = timeprefix.ZoneInfo
    installed = False

    def zone_info(name: str) -> ZoneInfo:
        if name == "Later/Zone":
            if not installed:
                raise ZoneInfoNotFoundError(name)
            return real("Asia/Tokyo")
        return real(name)

    monkeypatch.setattr(timeprefix, "ZoneInfo", zone_info)
    monkeypatch.setenv("TZ", "Europe/Paris")
    assert resolve_timezone("Later/Zone") == ZoneInfo("Europe/Paris")
    installed = True
    assert resolve_timezone("Later/Zone") == ZoneInfo("Asia/Tokyo")


def test_the_local_zone_is_read_at_each_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no zone named, the prefix shows the process's local zone now: a POSIX ``TZ``
    that names no zone file, changed between calls (with ``time.tzset``)."""
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is POSIX only")
    try:
        for setting, offset, zone in (("XST-3", "+03:00", "XST"), ("YST7", "-07:00", "YST")):
            monkeypatch.setenv("TZ", setting)
            time.tzset()
            stamped = stamp("x")
            assert stamped.endswith(f"{offset} {stamped[24:27]} {zone}]\nx"), stamped
            local = datetime.now().astimezone().tzinfo
            assert local is not None
            moment = datetime.strptime(stamped[1:17], "%Y-%m-%dT%H:%M").replace(tzinfo=local)
            assert stamped == f"{_format_prefix_before(moment)}\nx"
    finally:
        monkeypatch.undo()
        time.tzset()
