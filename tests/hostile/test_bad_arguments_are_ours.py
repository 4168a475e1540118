"""Bad arguments raise the package's own error naming the argument (issue 31, item 5).

Each of these used to escape as a builtin error from deep inside: a SQLite path holding a
lone surrogate (``UnicodeEncodeError``), a path too long for the file system (``OSError``),
a path under ``/proc`` (``FileNotFoundError``), ``capture_session_archive("str")`` and
``get_compaction_preimage(None)`` (``AttributeError``), ``write_session_archive(node, "x",
"y")`` (pydantic's ``ValidationError``). A bad path is a ``StoragePathError``, a
``ConfigurationError`` that is also an ``OSError`` (what was raised before); a bad record
argument an ``InvalidInputError``. Nothing is created or written.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    ConfigurationError,
    InvalidInputError,
    SessionStoreError,
    StoragePathError,
)

from .test_bad_input_errors import refused

KEY = "agent:main:bad-arguments"


def _bad_paths(tmp_path: Path) -> list[tuple[str, Any, str]]:
    too_long_name = tmp_path / ("x" * 5000 + ".db")
    too_deep = tmp_path.joinpath(*(["d" * 200] * 25), "store.db")
    return [
        ("lone surrogate", str(tmp_path / "bad\ud800.db"), "surrogate"),
        ("lone surrogate, as a Path", tmp_path / "bad\udfff.db", "surrogate"),
        ("lone surrogate, in a URL", f"sqlite+aiosqlite:///{tmp_path}/bad\ud800.db", "surrogate"),
        ("name too long", str(too_long_name), "too long"),
        ("path too long", str(too_deep), "too long"),
        ("under /proc", "/proc/opensquilla-nowhere/store.db", "No such file"),
        ("directly in /proc", "/proc/opensquilla-store.db", "No such file"),
    ]


CASES = [case for case, _target, _reason in _bad_paths(Path("/tmp"))]


@pytest.mark.skipif(sys.platform != "linux", reason="the paths are Linux's")
@pytest.mark.parametrize("case", CASES)
async def test_a_sqlite_path_that_cannot_be_a_file_is_a_storage_path_error(
    tmp_path: Path, case: str
) -> None:
    _case, target, reason = next(c for c in _bad_paths(tmp_path) if c[0] == case)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(StoragePathError) as caught:
        storage = SessionStorage(target)
        await storage.connect()
    error = caught.value
    assert isinstance(error, ConfigurationError) and isinstance(error, OSError)
    message = str(error)
    assert message.startswith("storage path '"), message
    assert reason in message, message
    assert "\n" not in message and len(message) < 400, message
    assert sorted(os.listdir(tmp_path)) == before  # nothing was created


async def test_a_record_argument_of_the_wrong_type_is_invalid_input(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "hello")
    entries, summaries = await manager.capture_session_archive(node)
    calls: list[tuple[str, Any]] = [
        ("node", lambda: manager.capture_session_archive("str")),  # type: ignore[arg-type]
        ("node", lambda: manager.capture_session_archive(None)),  # type: ignore[arg-type]
        ("summary", lambda: manager.get_compaction_preimage(None)),  # type: ignore[arg-type]
        ("summary", lambda: manager.get_compaction_preimage(node)),  # type: ignore[arg-type]
        ("entries", lambda: manager.write_session_archive(node, "x", "y")),  # type: ignore[arg-type]
        ("entries[0]", lambda: manager.write_session_archive(node, ["x"], [])),  # type: ignore[list-item]
        ("summaries", lambda: manager.write_session_archive(node, entries, "y")),  # type: ignore[arg-type]
        ("summaries[0]", lambda: manager.write_session_archive(node, entries, [node])),  # type: ignore[list-item]
        ("node", lambda: manager.write_session_archive("n", entries, summaries)),  # type: ignore[arg-type]
    ]
    for name, call in calls:
        error = await refused(storage, call, names=name)
        assert isinstance(error, InvalidInputError) and not isinstance(error, ValidationError)
        assert not isinstance(error, AttributeError)
        assert str(error).startswith(f"{name} must be"), str(error)
    # and the good calls still work
    await manager.write_session_archive(node, entries, summaries)


def test_the_errors_are_the_package_root() -> None:
    assert issubclass(StoragePathError, SessionStoreError)
