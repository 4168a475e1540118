"""compact, reset, branch, truncate, prune, cap (and their dry runs)."""

from __future__ import annotations

import json
from pathlib import Path

from opensquilla.session.support.clock import now_ms

from .support import append_script, cli, dump_tables, opened, run


async def _conversation(dsn: str, key: str = "agent:main:talk") -> list[str]:
    async with opened(dsn) as manager:
        await manager.create(key)
        return [entry.message_id for entry in await append_script(manager, key)]


def test_compact_and_strict_coverage(database: str) -> None:
    run(_conversation(database, "agent:main:loose"))
    run(_conversation(database, "agent:main:strict"))

    strict = cli(database, "compact", "agent:main:strict", "--window", "2000", "--strict", "--json")
    assert strict.exit_code == 0, strict.output
    blocked = json.loads(strict.stdout)
    assert blocked["skip_reason"] == "coverage_blocked" and blocked["removed_count"] == 0
    assert blocked["missing_obligations"]

    loose = cli(database, "compact", "agent:main:loose", "--window", "2000", "--json")
    done = json.loads(loose.stdout)
    assert done["removed_count"] == 8 and done["skip_reason"] is None
    assert done["coverage_status"] == "pass_with_backfill"
    tables = run(dump_tables(database))
    assert len(tables["compacted_transcript_entries"]) == 8
    assert [row["session_key"] for row in tables["session_summaries"]] == ["agent:main:loose"]

    human = cli(database, "compact", "agent:main:strict", "--window", "100000")
    assert "nothing compacted: within_compaction_budget" in human.stdout


def test_reset_reports_its_archive_file(database: str, _archive_dir: Path) -> None:
    run(_conversation(database))
    before = run(dump_tables(database))
    dry = cli(database, "reset", "agent:main:talk", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    preview = json.loads(dry.stdout)
    assert preview["dry_run"] is True and preview["rows"]["transcript_entries"] == 14
    assert run(dump_tables(database)) == before

    done = cli(database, "reset", "agent:main:talk", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["epoch"] == 1 and report["session_id"] != report["previous_session_id"]
    archive = Path(report["archive_path"])
    assert archive.parent == _archive_dir and archive.is_file()
    assert json.loads(archive.read_text())["session_id"] == report["previous_session_id"]
    assert len(json.loads(archive.read_text())["transcript_entries"]) == 14
    assert run(dump_tables(database))["transcript_entries"] == []

    empty = cli(database, "reset", "agent:main:talk")
    assert "archive: none" in empty.stdout


def test_branch_before_a_message_and_without_transcript(database: str) -> None:
    ids = run(_conversation(database))
    before = cli(
        database, "branch", "agent:main:talk", "agent:main:fork", "--before", ids[4], "--json"
    )
    assert before.exit_code == 0, before.output
    assert json.loads(before.stdout)["messages"] == 4

    empty = cli(database, "branch", "agent:main:talk", "agent:main:blank", "--no-transcript")
    assert empty.exit_code == 0 and "with 0 message(s)" in empty.stdout
    full = cli(database, "branch", "agent:main:talk", "agent:main:full")
    assert "with 14 message(s)" in full.stdout

    taken = cli(database, "branch", "agent:main:talk", "agent:main:fork")
    assert taken.exit_code == 1 and "already exists" in taken.stderr
    unknown = cli(database, "branch", "agent:main:talk", "agent:main:x", "--before", "nope")
    assert unknown.exit_code == 1 and "not found" in unknown.stderr


def test_truncate_with_dry_run(database: str) -> None:
    run(_conversation(database))
    before = run(dump_tables(database))
    dry = json.loads(
        cli(database, "truncate", "agent:main:talk", "5", "--dry-run", "--json").stdout
    )
    assert dry["rows"] == {"transcript_entries": 9, "compacted_transcript_entries": 0}
    assert run(dump_tables(database)) == before

    done = cli(database, "truncate", "agent:main:talk", "5", "--json")
    assert json.loads(done.stdout) == {"truncated": True, "before_count": 14, "after_count": 5}
    kept = [row["id"] for row in run(dump_tables(database))["transcript_entries"]]
    assert kept == [row["id"] for row in before["transcript_entries"]][-5:]
    assert "nothing to truncate" in cli(database, "truncate", "agent:main:talk", "5").stdout


async def _aged(dsn: str) -> None:
    """Three sessions last updated 40 days, 2 hours and just now ago."""
    async with opened(dsn) as manager:
        now = now_ms()
        await manager.create("agent:main:old")
        await manager.append_message("agent:main:old", "user", "old news")
        await manager.create("agent:main:recent")
        for key, age in (("agent:main:old", 40 * 86_400_000), ("agent:main:recent", 7_200_000)):
            await manager.storage.update_session_fields(key, {"updated_at": now - age})
        await manager.create("agent:main:fresh")


def test_prune_with_dry_run(database: str) -> None:
    run(_aged(database))
    before = run(dump_tables(database))
    dry = cli(database, "prune", "--older-than", "30d", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    preview = json.loads(dry.stdout)
    assert preview["sessions"] == ["agent:main:old"]
    assert preview["rows"]["transcript_entries"] == 1
    assert run(dump_tables(database)) == before
    human = cli(database, "prune", "--older-than", "90m", "--dry-run")
    assert "would delete 2 session(s)" in human.stdout and "nothing was changed" in human.stdout

    done = cli(database, "prune", "--older-than", "30d", "--json")
    assert json.loads(done.stdout) == {"dry_run": False, "deleted_sessions": 1}
    left = sorted(row["session_key"] for row in run(dump_tables(database))["sessions"])
    assert left == ["agent:main:fresh", "agent:main:recent"]

    bad = cli(database, "prune", "--older-than", "soon")
    assert bad.exit_code == 1 and "invalid duration 'soon'" in bad.stderr


def test_cap_with_dry_run(database: str) -> None:
    run(_aged(database))
    before = run(dump_tables(database))
    dry = json.loads(cli(database, "cap", "--max", "1", "--dry-run", "--json").stdout)
    assert dry["sessions"] == ["agent:main:old", "agent:main:recent"]
    assert run(dump_tables(database)) == before
    assert (
        json.loads(cli(database, "cap", "--max", "5", "--dry-run", "--json").stdout)["sessions"]
        == []
    )

    done = cli(database, "cap", "--max", "1")
    assert done.exit_code == 0 and "cap: deleted 2 session(s)" in done.stdout
    assert [r["session_key"] for r in run(dump_tables(database))["sessions"]] == [
        "agent:main:fresh"
    ]
