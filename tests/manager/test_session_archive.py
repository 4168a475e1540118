"""``capture_session_archive`` and ``write_session_archive``: a generation's archive as two
calls (upstream HEAD), writing the same file a reset writes, safely."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.fs import files
from opensquilla.session.models import CompactedTranscriptEntry, SessionSummary
from opensquilla.session.usecases import session_archive

KEY = "agent:main:archived"


def _names(directory: Path) -> list[str]:
    """Every name in ``directory``, hidden temporaries included."""
    return sorted(os.listdir(directory)) if directory.is_dir() else []


async def _history(manager: SessionManager, storage: SessionStorage, key: str = KEY) -> None:
    node = await manager.create(key)
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(
            [
                CompactedTranscriptEntry(
                    session_id=node.session_id,
                    session_key=node.session_key,
                    compaction_id="cmp_old",
                    compaction_index=0,
                    original_entry_id=1,
                    role="user",
                    content="compacted away",
                    created_at=1_000,
                    token_count=3,
                )
            ]
        )
    await manager.append_message(key, "assistant", "live reply")
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=key, summary_text="the gist")
    )


async def test_capture_reads_what_a_reset_would_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _history(manager, storage)
    await manager.create("agent:main:other")
    await manager.append_message("agent:main:other", "user", "not this session")
    node = await manager.get_session(KEY)
    assert node is not None

    entries, summaries = await manager.capture_session_archive(node)

    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.model_dump() for e in entries] == [e.model_dump() for e in canonical]
    assert [e.content for e in entries] == ["compacted away", "live reply"]
    assert [s.summary_text for s in summaries] == ["the gist"]
    renewed = await manager.reset(KEY)  # the captured generation is gone after a reset
    assert await manager.capture_session_archive(node) == ([], [])
    assert await manager.capture_session_archive(renewed) == ([], [])


async def test_write_gives_the_reset_archive_document(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    await _history(manager, storage)
    node = await manager.get_session(KEY)
    assert node is not None
    entries, summaries = await manager.capture_session_archive(node)

    await manager.write_session_archive(node, entries, summaries)
    (written,) = _archive_dir.glob("*.json")
    by_reset = (await manager.reset_with_report(KEY)).archive_path

    assert by_reset is not None and by_reset != written
    mine = json.loads(written.read_text(encoding="utf-8"))
    theirs = json.loads(by_reset.read_text(encoding="utf-8"))
    assert list(mine) == list(theirs)
    for field in ("schema_version", "reason", "session_key", "session_id", "summaries"):
        assert mine[field] == theirs[field], field
    assert mine["transcript_entries"] == theirs["transcript_entries"]
    assert mine["session"] == node.model_dump()  # the node as given (the reset's is bumped)


async def test_nothing_is_written_for_an_empty_generation(
    manager: SessionManager, _archive_dir: Path
) -> None:
    node = await manager.create(KEY)

    await manager.write_session_archive(node, [], [])

    assert not _archive_dir.exists()  # not even the directory


async def test_write_fsyncs_before_the_atomic_publish_and_never_collides(
    manager: SessionManager,
    storage: SessionStorage,
    _archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _history(manager, storage)
    node = await manager.get_session(KEY)
    assert node is not None
    entries, summaries = await manager.capture_session_archive(node)
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        events.append(("fsync", "directory" if is_dir else "file"))
        fsync(fd)

    def recording_replace(source: str, target: str) -> None:
        assert stat.S_IMODE(os.stat(source).st_mode) == 0o600
        events.append(("replace", Path(source).name))
        replace(source, target)

    monkeypatch.setattr(files.os, "fsync", recording_fsync)
    monkeypatch.setattr(files.os, "replace", recording_replace)
    monkeypatch.setattr(session_archive, "now_ms", lambda: 1_700_000_000_000)  # one millisecond

    await manager.write_session_archive(node, entries, summaries)
    await manager.write_session_archive(node, entries, summaries)

    names = _names(_archive_dir)
    assert len(names) == 2 and all(n.startswith("1700000000000-") for n in names), names
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"] * 2
    assert [what for kind, what in events if kind == "fsync"] == ["file", "directory"] * 2
    temporaries = [what for kind, what in events if kind == "replace"]
    assert all(t.startswith(".") and t.endswith(".tmp") for t in temporaries), temporaries
    assert sorted(t[1:].split(".json.")[0] + ".json" for t in temporaries) == names


@pytest.mark.parametrize("failing", ["replace", "fsync"])
async def test_publish_failure_removes_the_temporary_file(
    manager: SessionManager,
    storage: SessionStorage,
    _archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    await _history(manager, storage)
    node = await manager.get_session(KEY)
    assert node is not None
    entries, summaries = await manager.capture_session_archive(node)

    def refuse(*args: object) -> None:
        raise OSError(5, f"{failing} failed")

    monkeypatch.setattr(files.os, failing, refuse)

    with pytest.raises(OSError, match=f"{failing} failed"):
        await manager.write_session_archive(node, entries, summaries)

    assert _names(_archive_dir) == []


async def test_file_name_is_bounded_but_the_document_keeps_the_full_key(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    key = "agent:main:" + "a-very-long-channel-name/" * 19  # 486 characters
    await _history(manager, storage, key)
    node = await manager.get_session(key)
    assert node is not None
    entries, summaries = await manager.capture_session_archive(node)

    await manager.write_session_archive(node, entries, summaries)
    await manager.reset(key)

    for path in _archive_dir.glob("*.json"):
        stamp, rest = path.name.split("-", 1)
        assert stamp.isdigit()
        assert rest.startswith("agent-main-a-very-long-channel-name-")
        safe_key = rest[: rest.index(f"-{node.session_id}-")]
        assert len(safe_key) == 64
        assert len(path.name.encode()) < 255 - 1 - 1 - 32 - 1 - 8 - 4  # room for the temporary
        assert json.loads(path.read_text(encoding="utf-8"))["session_key"] == key
    assert len(list(_archive_dir.glob("*.json"))) == 2


@pytest.mark.skipif(os.name == "nt", reason="POSIX permission semantics only")
async def test_directory_is_made_private_only_when_this_call_creates_it(
    manager: SessionManager,
    storage: SessionStorage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _history(manager, storage)
    node = await manager.get_session(KEY)
    assert node is not None
    entries, summaries = await manager.capture_session_archive(node)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    created = shared / "nested" / "archives"

    previous = os.umask(0o022)
    try:
        monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(created))
        await manager.write_session_archive(node, entries, summaries)
        monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(shared))
        await manager.write_session_archive(node, entries, summaries)
    finally:
        os.umask(previous)

    assert stat.S_IMODE(shared.stat().st_mode) == 0o755  # existed: left alone
    assert stat.S_IMODE((shared / "nested").stat().st_mode) == 0o700
    assert stat.S_IMODE(created.stat().st_mode) == 0o700
    (inner,) = created.glob("*.json")
    (outer,) = shared.glob("*.json")
    assert stat.S_IMODE(inner.stat().st_mode) == stat.S_IMODE(outer.stat().st_mode) == 0o600
