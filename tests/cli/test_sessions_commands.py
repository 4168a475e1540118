"""sessions list / sessions show."""

from __future__ import annotations

import json
import shlex

from .support import NUL_TEXT, cli, opened, run, seed_rich


async def _population(dsn: str) -> None:
    async with opened(dsn) as manager:
        for index in range(5):
            await manager.create(f"agent:main:s{index}")
        await manager.create("agent:ops:alpha", agent_id="ops")
        await manager.finish("agent:main:s1", "done")
        await manager.branch("agent:main:s0", "agent:main:s0-child")
        await manager.resume("agent:main:s3")  # the most recently updated


def _keys(result) -> list[str]:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return [node["session_key"] for node in json.loads(result.stdout)["sessions"]]


def test_list_filters_and_pages(database: str) -> None:
    run(_population(database))
    everything = _keys(cli(database, "sessions", "list", "--json"))
    assert len(everything) == 7 and everything[0] == "agent:main:s3"
    assert _keys(cli(database, "sessions", "list", "--agent", "ops", "--json")) == [
        "agent:ops:alpha"
    ]
    assert _keys(cli(database, "sessions", "list", "--status", "done", "--json")) == [
        "agent:main:s1"
    ]
    assert _keys(cli(database, "sessions", "list", "--parent", "agent:main:s0", "--json")) == [
        "agent:main:s0-child"
    ]
    first = _keys(cli(database, "sessions", "list", "--limit", "3", "--json"))
    rest = _keys(cli(database, "sessions", "list", "--limit", "3", "--offset", "3", "--json"))
    assert first + rest == everything[:6]

    human = cli(database, "sessions", "list", "--agent", "ops")
    assert human.exit_code == 0 and "agent:ops:alpha" in human.stdout
    assert "no sessions" in cli(database, "sessions", "list", "--agent", "nobody").stdout
    bad = cli(database, "sessions", "list", "--status", "sleeping")
    assert bad.exit_code != 0


def test_show_live_and_canonical(database: str) -> None:
    seeded = run(seed_rich(database, big=False))
    live = cli(database, "sessions", "show", seeded.compacted, "--json")
    assert live.exit_code == 0, live.output
    shown = json.loads(live.stdout)
    canonical = json.loads(
        cli(database, "sessions", "show", seeded.compacted, "--canonical", "--json").stdout
    )
    assert shown["transcript_view"] == "live" and canonical["transcript_view"] == "canonical"
    assert len(canonical["transcript"]) > len(shown["transcript"])
    assert shown["session"]["label"] == NUL_TEXT
    assert len(shown["summaries"]) == 1 and shown["summaries"][0]["compaction_id"] == "cmp_seed"
    kinds = {state["state_kind"] for state in shown["context_states"]}
    assert kinds == {"structured_summary_v1", "response_id"}

    human = cli(database, "sessions", "show", seeded.compacted, "--canonical")
    assert human.exit_code == 0, human.output
    text = human.stdout
    assert "canonical transcript" in text and "summaries (1)" in text
    assert "↳ get_weather(" in text  # a tool call, folded to one line
    assert "↩ call_weather_1:" in text  # its result, folded too
    assert "before\\x00after" in text  # NUL shown as an escape, not written raw
    assert "\x00" not in text
    assert "context states (2)" in text


def test_show_pages_the_canonical_transcript(database: str) -> None:
    """--limit shows the newest page; the printed --before walks back to the first message,
    every canonical message exactly once, archive included."""
    seeded = run(seed_rich(database, big=False))
    canonical = json.loads(
        cli(database, "sessions", "show", seeded.compacted, "--canonical", "--json").stdout
    )
    everything = [entry["id"] for entry in canonical["transcript"]]
    walked: list[int] = []
    before: list[str] = []
    while True:
        result = cli(
            database, "sessions", "show", seeded.compacted, "--limit", "2", *before, "--json"
        )
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["transcript_view"] == "canonical" and len(shown["transcript"]) <= 2
        walked[:0] = [entry["id"] for entry in shown["transcript"]]
        assert shown["page"]["has_more"] is (shown["page"]["older"] is not None)
        if shown["page"]["older"] is None:
            break
        before = ["--before", shown["page"]["older"]]
    assert walked == everything and len(everything) > 2

    human = cli(database, "sessions", "show", seeded.compacted, "--limit", "1")
    assert human.exit_code == 0, human.output
    [last] = [line for line in human.stdout.splitlines() if line.startswith("older: --before ")]
    again = cli(
        database,
        "sessions",
        "show",
        seeded.compacted,
        "--limit",
        "1",
        *shlex.split(last.removeprefix("older: ")),
        "--json",
    )
    assert [e["id"] for e in json.loads(again.stdout)["transcript"]] == everything[-2:-1]


def test_show_refuses_a_malformed_before(database: str) -> None:
    seeded = run(seed_rich(database, big=False))
    result = cli(database, "sessions", "show", seeded.compacted, "--before", "yesterday")
    assert result.exit_code == 1
    assert "--before must be <created_at>:<id>" in result.stderr


def test_show_the_old_generations_states(database: str) -> None:
    seeded = run(seed_rich(database, big=False))
    shown = json.loads(cli(database, "sessions", "show", seeded.reset, "--json").stdout)
    assert [s["valid"] for s in shown["context_states"]] == [False]
    assert [e["content"] for e in shown["transcript"]] == ["second generation"]


def test_show_a_missing_session(database: str) -> None:
    result = cli(database, "sessions", "show", "agent:main:ghost")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: Session not found: agent:main:ghost"


def _page(result) -> tuple[list[str], str | None]:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    return [node["session_key"] for node in data["sessions"]], data["next_cursor"]


def test_list_walks_keyset_pages_with_the_printed_cursor(database: str) -> None:
    run(_population(database))
    everything = _keys(cli(database, "sessions", "list", "--json"))
    walked: list[str] = []
    cursor_args: list[str] = []
    while True:
        keys, cursor = _page(
            cli(database, "sessions", "list", "--limit", "3", "--json", *cursor_args)
        )
        walked += keys
        if cursor is None:
            break
        assert cursor.split(":", 1)[1] == keys[-1]  # <updated_at>:<session_key>
        cursor_args = ["--cursor", cursor]
    assert walked == everything and len(walked) == 7

    human = cli(database, "sessions", "list", "--limit", "2")
    assert human.exit_code == 0, human.output
    last_line = human.stdout.strip().splitlines()[-1]
    assert last_line.startswith("more: --cursor ")
    printed = shlex.split(last_line.removeprefix("more: "))
    assert (
        _page(cli(database, "sessions", "list", "--limit", "2", "--json", *printed))[0]
        == (everything[2:4])
    )
    final = cli(database, "sessions", "list", "--limit", "7")
    assert "more:" not in final.stdout
    assert _page(cli(database, "sessions", "list", "--offset", "1", "--json"))[1] is None


def test_list_refuses_a_bad_or_conflicting_cursor(database: str) -> None:
    run(_population(database))
    for args in (["--cursor", "agent:main:s1"], ["--cursor", "x:agent:main:s1"]):
        bad = cli(database, "sessions", "list", *args)
        assert bad.exit_code == 1 and "cursor" in bad.stderr, bad.output
    both = cli(database, "sessions", "list", "--cursor", "1:agent:main:s1", "--offset", "2")
    assert both.exit_code == 1
    assert "--cursor cannot be combined with --offset or --parent" in both.stderr
