"""search: title matches, word and substring hits, --session, --archived, text and JSON."""

from __future__ import annotations

import json
from typing import Any

from opensquilla.session.cli.render.search import highlight

from .support import cli, opened, run, seed_rich


async def _population(dsn: str) -> None:
    async with opened(dsn) as manager:
        await manager.create("agent:main:notes", display_name="Deploy notes")
        await manager.append_message("agent:main:notes", "user", "deploy the kubernetes rollout")
        await manager.create("agent:main:ops")
        await manager.append_message("agent:main:ops", "user", "kubernetes deploy went fine")
        await manager.append_message(
            "agent:main:ops", "assistant", "[red]kubernetes[/red] deploy \x1b[31m done"
        )
        await manager.create("agent:main:cjk")
        await manager.append_message("agent:main:cjk", "user", "今天部署了新的版本")
        await manager.create("agent:main:quiet")
        await manager.append_message("agent:main:quiet", "user", "nothing to see here")


def _json(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_words_path_titles_first_then_one_hit_per_other_session(database: str) -> None:
    run(_population(database))
    found = _json(cli(database, "search", "deploy", "--json"))
    assert found["path"] == "words"
    assert [node["session_key"] for node in found["sessions"]] == ["agent:main:notes"]
    assert found["sessions"][0]["display_name"] == "Deploy notes"
    assert set(found["sessions"][0]) >= {"session_key", "session_id", "status", "updated_at"}
    # The title match's own message is not repeated; one hit for the other session.
    assert [hit["session_key"] for hit in found["messages"]] == ["agent:main:ops"]
    hit = found["messages"][0]
    assert set(hit) == {
        "id",
        "session_key",
        "role",
        "created_at",
        "snippet",
        "session_id",
        "message_id",
        "archived",
        "rank",
    }
    assert ">>>deploy<<<" in hit["snippet"].lower()
    assert hit["archived"] is False and isinstance(hit["rank"], float)

    nothing = _json(cli(database, "search", "absent", "--json"))
    assert nothing == {"path": "words", "sessions": [], "messages": []}
    assert "no matches" in cli(database, "search", "absent").stdout


def test_substring_path_for_non_ascii(database: str) -> None:
    run(_population(database))
    found = _json(cli(database, "search", "部署", "--json"))
    assert found["path"] == "substring" and found["sessions"] == []
    assert [hit["session_key"] for hit in found["messages"]] == ["agent:main:cjk"]
    assert found["messages"][0]["snippet"] == "今天>>>部署<<<了新的版本"
    assert found["messages"][0]["rank"] is None


def test_session_filter_and_limit(database: str) -> None:
    run(_population(database))
    scoped = _json(cli(database, "search", "kubernetes", "--session", "agent:main:ops", "--json"))
    assert scoped["sessions"] == []
    assert {hit["session_key"] for hit in scoped["messages"]} == {"agent:main:ops"}
    assert len(scoped["messages"]) == 2  # every hit of the session, not one per session
    one = _json(
        cli(
            database,
            "search",
            "kubernetes",
            "--session",
            "agent:main:ops",
            "--limit",
            "1",
            "--json",
        )
    )
    assert len(one["messages"]) == 1
    everywhere = _json(cli(database, "search", "kubernetes", "--json"))
    assert sorted(hit["session_key"] for hit in everywhere["messages"]) == [
        "agent:main:notes",
        "agent:main:ops",
    ]
    assert _json(cli(database, "search", "kubernetes", "--limit", "0", "--json"))["messages"] == []

    missing = cli(database, "search", "kubernetes", "--session", "agent:main:nope")
    assert missing.exit_code == 1
    assert "Session not found" in missing.stderr and "agent:main:nope" in missing.stderr
    assert missing.stdout == ""
    assert cli(database, "search", "kubernetes", "--limit", "-1").exit_code == 2


def test_archived_rows_only_on_request(database: str) -> None:
    seeded = run(seed_rich(database, big=False))
    key = seeded.compacted
    live = _json(cli(database, "search", "backslash", "--session", key, "--json"))
    assert live["messages"] == []  # the message holding it was compacted away
    archived = _json(cli(database, "search", "backslash", "--session", key, "--archived", "--json"))
    assert len(archived["messages"]) == 1
    hit = archived["messages"][0]
    assert hit["archived"] is True and hit["session_key"] == key and hit["role"] == "assistant"
    assert ">>>backslash<<<" in hit["snippet"]

    text = cli(database, "search", "backslash", "--session", key, "--archived")
    assert text.exit_code == 0, text.output
    assert "(archived)" in text.stdout and "\x00" not in text.stdout


def test_text_output_is_escaped_and_highlighted(database: str) -> None:
    run(_population(database))
    result = cli(database, "search", "kubernetes", "--session", "agent:main:ops")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "messages (2, words search)" in text
    assert "agent:main:ops" in text and "assistant" in text and "user" in text
    assert "[red]" in text  # stored markup shown as text, not applied
    assert "\x1b" not in text and "\\x1b" in text  # ESC shown as an escape
    assert ">>>" not in text and "<<<" not in text  # markers become highlighting

    titles = cli(database, "search", "deploy")
    assert titles.exit_code == 0, titles.output
    assert "sessions (1)" in titles.stdout and "Deploy notes" in titles.stdout


def test_highlight_marks_hits_and_escapes_the_rest() -> None:
    assert highlight("a >>>b<<< c") == "a [bold reverse]b[/bold reverse] c"
    assert highlight("[x] >>>[y]<<<") == "\\[x] [bold reverse]\\[y][/bold reverse]"
    assert highlight("x >>>y <<<z<<< >>>") == "x [bold reverse]y [/bold reverse]z<<< >>>"
    assert highlight("line\nbreak") == "line\\nbreak"
