"""repair list/show/mark, stats, demo, logging, errors and the module entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .support import append_script, cli, dump_tables, opened, run, seed_rich


async def _degraded(dsn: str) -> None:
    async with opened(dsn) as manager:
        for key, status in (
            ("agent:main:a", "degraded_forensic"),
            ("agent:ops:b", "failed_retryable"),
        ):
            await manager.create(key)
            await append_script(manager, key)
            result = await manager.compact_with_result(
                key, 2000, compaction_id=f"cmp_{key[-1]}", flush_receipt_status=status
            )
            assert result.removed_count


def test_repair_queue(database: str) -> None:
    run(_degraded(database))
    listed = cli(database, "repair", "list", "--json")
    assert listed.exit_code == 0, listed.output
    queue = json.loads(listed.stdout)["summaries"]
    assert [s["flush_receipt_status"] for s in queue] == ["degraded_forensic", "failed_retryable"]
    only_ops = json.loads(cli(database, "repair", "list", "--agent", "ops", "--json").stdout)
    assert [s["session_key"] for s in only_ops["summaries"]] == ["agent:ops:b"]

    first = queue[0]["id"]
    shown = json.loads(cli(database, "repair", "show", str(first), "--json").stdout)
    assert shown["summary"]["compaction_id"] == "cmp_a"
    assert len(shown["preimage"]) == 8
    assert shown["preimage"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    human = cli(database, "repair", "show", str(first))
    assert "preimage (8 messages)" in human.stdout

    marked = cli(database, "repair", "mark", str(first), "safe")
    assert marked.exit_code == 0, marked.output
    assert "now safe" in marked.stdout
    left = json.loads(cli(database, "repair", "list", "--json").stdout)["summaries"]
    assert [s["session_key"] for s in left] == ["agent:ops:b"]

    assert cli(database, "repair", "mark", str(first), "bogus").exit_code != 0
    missing = cli(database, "repair", "show", "999999")
    assert missing.exit_code == 1 and "no compaction summary with id 999999" in missing.stderr


def test_stats(database: str, _archive_dir: Path) -> None:
    run(_degraded(database))

    async def more() -> None:
        async with opened(database) as manager:
            await manager.create("agent:main:c")
            await manager.append_message("agent:main:c", "user", "hello")
            await manager.reset("agent:main:c")

    run(more())
    result = cli(database, "stats", "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    tables = run(dump_tables(database))
    assert stats["sessions"] == 3
    assert stats["entries"] == {"live": 12, "archived": 16}
    assert stats["entries"]["live"] == len(tables["transcript_entries"])
    expected_chars = sum(len(r["content"] or "") for r in tables["compacted_transcript_entries"])
    assert stats["archive"]["content_chars"] == expected_chars
    assert stats["summaries_by_flush_status"] == {"degraded_forensic": 1, "failed_retryable": 1}
    assert stats["degraded_queue"] == 2
    assert stats["context_states"] == {"total": 2, "valid": 2}
    assert stats["reset_archives"]["files"] == 1
    assert stats["reset_archives"]["directory"] == str(_archive_dir)
    human = cli(database, "stats")
    assert "repair queue:      2" in human.stdout


def test_demo_writes_into_a_new_temporary_directory_and_says_so(
    tmp_path: Path, monkeypatch
) -> None:
    """Unless told where, the demo never touches the embedded default database (or the
    home's archive directory): each run gets a new temporary directory, named in its output."""
    monkeypatch.delenv("OPENSQUILLA_SESSION_DSN", raising=False)
    monkeypatch.delenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", raising=False)
    home = tmp_path / "home"  # OPENSQUILLA_STATE_DIR (set by the autouse fixture)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    first = cli(None, "demo", "--json")
    assert first.exit_code == 0, first.output
    second = cli(None, "demo")
    assert second.exit_code == 0, second.output

    report = json.loads(first.stdout)
    assert report["chosen_by"] == "a new temporary directory"
    directory = Path(report["directory"])
    assert directory.parent == temporary
    db = directory / "sessions.db"
    assert report["database"].endswith(str(db))
    assert oct(db.stat().st_mode & 0o777) == "0o600"
    assert not (home / "sessions.db").exists() and not (home / "session-archive").exists()
    steps = {step["step"]: step for step in report["steps"]}
    assert list(steps) == ["create", "append", "compact", "branch", "reset"]
    assert steps["compact"]["removed"] == 8 and steps["compact"]["summary"]
    assert steps["compact"]["coverage_status"] == "pass_with_backfill"
    assert steps["compact"]["glossary"]["coverage"].endswith("/glossary/#coverage")
    assert steps["branch"]["messages"] == 8
    archive = Path(steps["reset"]["archive_path"])
    assert archive.is_file() and archive.parent == directory / "session-archive"

    (other,) = set(temporary.iterdir()) - {directory}  # the second run: a directory of its own
    assert str(other) in second.stdout and f"{other}/sessions.db" in second.stdout
    for title in ("create", "append", "compact", "branch", "reset"):
        assert title in second.stdout
    assert "old generation archived to" in second.stdout
    assert "coverage: https://" in second.stdout and "/glossary/#coverage" in second.stdout

    keys = json.loads(cli(str(db), "sessions", "list", "--agent", "demo", "--json").stdout)
    assert len(keys["sessions"]) == 2  # one run: a session and its branch


def test_demo_in_a_named_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OPENSQUILLA_SESSION_DSN", raising=False)
    target = tmp_path / "demo-here"
    result = cli(None, "demo", "--dir", str(target), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["chosen_by"] == "--dir" and report["directory"] == str(target)
    assert (target / "sessions.db").is_file()
    steps = {step["step"]: step for step in report["steps"]}
    assert Path(steps["reset"]["archive_path"]).parent == target / "session-archive"
    both = cli(str(tmp_path / "x.db"), "demo", "--dir", str(target))
    assert both.exit_code == 1 and "not both" in both.stderr
    assert not (tmp_path / "x.db").exists()


def test_demo_respects_dsn(database: str) -> None:
    result = cli(database, "demo", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["chosen_by"] == "--dsn"
    key = json.loads(result.stdout)["session_key"]
    assert key in {row["session_key"] for row in run(dump_tables(database))["sessions"]}


def test_verbose_logs_carry_session_and_operation(database: str) -> None:
    async def talk() -> None:
        async with opened(database) as manager:
            await manager.create("agent:main:logged")
            await manager.append_message("agent:main:logged", "user", "hi")

    run(talk())
    quiet = cli(database, "reset", "agent:main:logged")
    assert "INFO" not in quiet.stderr
    run(_again(database))  # something for the next reset to archive
    loud = cli(database, "-v", "reset", "agent:main:logged")
    assert loud.exit_code == 0, loud.output
    lines = [line for line in loud.stderr.splitlines() if "archived" in line]
    assert lines and "[reset agent:main:logged]" in lines[0]


async def _again(dsn: str) -> None:
    async with opened(dsn) as manager:
        await manager.append_message("agent:main:logged", "user", "again")


def test_errors_are_one_line_without_secrets(tmp_path: Path) -> None:
    refused = cli("postgresql+psycopg2://ops:s3cret@127.0.0.1/db", "stats")
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: ") and len(refused.stderr.splitlines()) == 1
    assert "s3cret" not in refused.output and "Traceback" not in refused.output

    unreachable = cli("postgresql://ops:s3cret@127.0.0.1:1/db", "sessions", "list")
    assert unreachable.exit_code == 1
    assert "s3cret" not in unreachable.output and "Traceback" not in unreachable.output
    assert len(unreachable.stderr.strip().splitlines()) == 1

    missing = cli(str(tmp_path / "x.db"), "import", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 1 and "nope.jsonl" in missing.stderr


def test_python_dash_m_and_the_env_dsn(database: str) -> None:
    env = {**os.environ, "OPENSQUILLA_SESSION_DSN": database}
    result = subprocess.run(
        [sys.executable, "-m", "opensquilla.session", "sessions", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard: a loaded machine needs seconds, not minutes
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sessions"] == []
    assert cli(None, "db", "current", env={"OPENSQUILLA_SESSION_DSN": database}).exit_code == 0


def test_seeded_stats_match_the_tables(database: str) -> None:
    run(seed_rich(database, big=False))
    stats = json.loads(cli(database, "stats", "--json").stdout)
    tables = run(dump_tables(database))
    assert stats["sessions"] == len(tables["sessions"])
    assert stats["entries"]["archived"] == len(tables["compacted_transcript_entries"])
    assert stats["context_states"]["total"] == len(tables["session_context_states"])
