"""Stored text cannot break or drive the terminal, and machine output is strict.

A stored status of ``[/x]`` crashed ``stats`` and ``sessions list`` with a markup traceback
(and ``reset`` after it had committed, so the archive path was never shown); control
characters reached the terminal raw; ``:smile:`` in a key became an emoji. Every human
output now escapes markup and shows control characters as escapes; ``--json`` is strict
JSON (``"NaN"``/``"Infinity"`` strings, control characters as ``\\u`` escapes) however
deeply the stored JSON is nested; a garbage option value is one line, never a traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.db.repos.transfer import TABLES
from opensquilla.session.db.tables import session_summaries, sessions

from ..cli.support import cli, opened, run

# What a terminal would act on: OSC (set the title), clear screen, colour, 8-bit CSI,
# carriage return, bell, a right-to-left override, DEL.
RAW = ["\x1b", "\x07", "\r", "\x9b", "\u202e", "\x7f"]
DRIVE = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
KEY = "agent:main:[/x]:smile:" + DRIVE + "\x9b2J\u202e"
ESCAPES = ["\\x1b", "\\x07", "\\x9b", "\\u202e"]
MARKUP = "[/x]"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth - 1):
        value = {f"level{level}": value} if level % 2 else [value]
    return {"top": value}


DEEP = _nested(900)


async def _seed(dsn: str) -> int:
    """A session whose every stored text field is hostile; returns a degraded summary id."""
    async with opened(dsn) as manager:
        await manager.create(
            KEY,
            model="model " + DRIVE,
            label="label\r\x07" + MARKUP,
            delivery_context={"channel": DRIVE, MARKUP: "[bold]x"},
        )
        call = [
            {
                "id": "call\x1b[1m",
                "type": "function",
                "function": {"name": "f" + DRIVE, "arguments": "{}"},
            }
        ]
        for index in range(6):
            await manager.append_message(
                KEY, "user", f"content {index} {DRIVE} {MARKUP}", token_count=300
            )
            await manager.append_message(KEY, "assistant", "", tool_calls=call, token_count=300)
            await manager.append_message(
                KEY, "tool", "result " + DRIVE, tool_call_id="call\x1b[1m", token_count=300
            )
        result = await manager.compact_with_result(KEY, 2000, compaction_id="cmp" + DRIVE + MARKUP)
        assert result.removed_count > 0, result.skip_reason
        for index in range(6):
            await manager.append_message(KEY, "user", f"more {index} {DRIVE}", token_count=300)
        again = await manager.compact_with_result(KEY, 2000, compaction_id="second")
        assert again.removed_count > 0, again.skip_reason
        await manager.append_message(KEY, "assistant", "deep", turn_usage=DEEP, token_count=1)
    async with SessionStorage(dsn) as storage, storage.engine.begin() as conn:
        # Values the store's writers refuse, as a legacy or hand-edited database holds them.
        generation = "gen" + DRIVE + MARKUP
        for table in TABLES.values():
            await conn.execute(
                sa.update(table).where(table.c.session_key == KEY).values(session_id=generation)
            )
        await conn.execute(
            sa.update(sessions)
            .where(sessions.c.session_key == KEY)
            .values(status=MARKUP, agent_id="[bold]agent" + DRIVE, total_cost_usd=math.inf)
        )
        summary_id = (
            await conn.execute(sa.select(sa.func.min(session_summaries.c.id)))
        ).scalar_one()
        # The first summary waits in the repair queue; the second has a status nobody
        # knows (``stats`` counts summaries by status).
        await conn.execute(
            sa.update(session_summaries)
            .where(session_summaries.c.session_key == KEY)
            .values(flush_receipt_status=MARKUP + DRIVE, coverage_status=MARKUP + DRIVE)
        )
        await conn.execute(
            sa.update(session_summaries)
            .where(session_summaries.c.id == summary_id)
            .values(flush_receipt_status="degraded_forensic")
        )
    return int(summary_id)


def _shown_safely(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the terminal"


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"bare {name} in --json output")

    _shown_safely(text)
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def hostile(database: str) -> int:
    return run(_seed(database))


HUMAN = [
    ("sessions", "list"),
    ("sessions", "show", KEY),
    ("sessions", "show", KEY, "--canonical"),
    ("stats",),
    ("repair", "list"),
    ("-vv", "sessions", "list"),
    ("-vv", "export"),
]


@pytest.mark.parametrize("argv", HUMAN, ids=lambda a: " ".join(a).split("agent")[0].strip())
def test_human_output_escapes_markup_and_shows_controls(
    database: str, hostile: int, argv: tuple[str, ...]
) -> None:
    result = cli(database, *argv)
    assert result.exit_code == 0, result.output
    _shown_safely(result.output)
    assert "Traceback" not in result.output
    assert "😄" not in result.output
    if argv[0] != "-vv":
        assert "\\x1b" in result.stdout


def test_the_list_shows_the_stored_status_literally(database: str, hostile: int) -> None:
    result = cli(database, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert MARKUP in result.stdout and ":smile:" in result.stdout


def test_repair_show_and_mark_show_their_summary_safely(database: str, hostile: int) -> None:
    shown = cli(database, "repair", "show", str(hostile))
    assert shown.exit_code == 0, shown.output
    _shown_safely(shown.output)
    marked = cli(database, "repair", "mark", str(hostile), "safe")
    assert marked.exit_code == 0, marked.output


def test_reset_after_its_commit_still_reports_the_archive(database: str, hostile: int) -> None:
    result = cli(database, "reset", KEY)
    assert result.exit_code == 0, result.output
    _shown_safely(result.output)
    assert "archive: " in result.stdout and ".json" in result.stdout


def test_copy_and_branch_outputs_are_safe(database: str, hostile: int, tmp_path: Path) -> None:
    copied = cli(None, "-vv", "copy", "--from", database, "--to", str(tmp_path / "copy.db"))
    assert copied.exit_code in (0, 2), copied.output  # the hostile session may be refused
    _shown_safely(copied.output)
    branched = cli(database, "branch", KEY, "agent:main:child" + DRIVE)
    assert branched.exit_code == 0, branched.output
    _shown_safely(branched.output)


def test_errors_naming_stored_text_are_one_safe_line(database: str, hostile: int) -> None:
    result = cli(database, "sessions", "show", "agent:main:missing" + DRIVE + MARKUP)
    assert result.exit_code == 1
    _shown_safely(result.output)
    assert len(result.stderr.splitlines()) == 1 and MARKUP in result.stderr


JSON = [
    ("sessions", "list", "--json"),
    ("sessions", "show", KEY, "--json"),
    ("sessions", "show", KEY, "--canonical", "--json"),
    ("stats", "--json"),
    ("repair", "list", "--json"),
]


@pytest.mark.parametrize("argv", JSON, ids=lambda a: " ".join(a).split("agent")[0].strip())
def test_json_output_is_strict_and_lossless(
    database: str, hostile: int, argv: tuple[str, ...]
) -> None:
    result = cli(database, *argv)
    assert result.exit_code == 0, result.output
    document = _strict(result.stdout)
    if argv[:2] == ("sessions", "list"):
        (node,) = document["sessions"]
        assert node["session_key"] == KEY and node["status"] == MARKUP
        assert node["total_cost_usd"] == "Infinity"
    if argv[:2] == ("sessions", "show"):
        usages = [entry["turn_usage"] for entry in document["transcript"] if entry["turn_usage"]]
        assert usages == [DEEP]
        assert document["session"]["delivery_context"] == {"channel": DRIVE, MARKUP: "[bold]x"}


@pytest.mark.postgres_only
def test_nan_is_a_string_in_json_output(database: str, hostile: int) -> None:
    """Postgres holds a NaN cost (SQLite cannot: NaN is NULL to it): ``--json`` writes it
    as the string ``"NaN"``, never a bare ``NaN`` that a strict parser refuses."""

    async def nan() -> None:
        async with SessionStorage(database) as storage, storage.engine.begin() as conn:
            await conn.execute(sa.update(sessions).values(billed_cost_usd=math.nan))

    run(nan())
    result = cli(database, "sessions", "list", "--json")
    assert result.exit_code == 0, result.output
    (node,) = _strict(result.stdout)["sessions"]
    assert node["billed_cost_usd"] == "NaN"
    human = cli(database, "sessions", "show", KEY)
    assert human.exit_code == 0 and "NaN" in human.stdout


GARBAGE = [
    (("cap", "--max", "99999999999999999999999"), 2),
    (("cap", "--max", "-1"), 2),
    (("cap", "--max", "lots"), 2),
    (("sessions", "list", "--limit", "9223372036854775808"), 2),
    (("sessions", "list", "--offset", "99999999999999999999999"), 2),
    (("sessions", "list", "--status", "[/x]"), 2),
    (("repair", "list", "--limit", "9223372036854775808"), 2),
    (("repair", "show", "99999999999999999999999"), 2),
    (("truncate", "agent:main:x", "99999999999999999999999"), 2),
    (("compact", "agent:main:x", "--window", "99999999999999999999999"), 2),
    (("copy", "--from", "a.db", "--to", "b.db", "--jobs", "1000000"), 2),
    (("copy", "--from", "a.db", "--to", "b.db", "--batch-size", "99999999999"), 2),
    (("prune", "--older-than", "99999999999999999999d"), 1),
    (("prune", "--older-than", "1e400d"), 1),
    (("prune", "--older-than", "-5d"), 1),
]


@pytest.mark.parametrize(
    ("argv", "code"), GARBAGE, ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v)
)
def test_a_garbage_option_value_is_one_line_never_a_traceback(
    database: str, argv: tuple[str, ...], code: int
) -> None:
    result = cli(database, *argv)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "╭" not in result.output
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, result.output
