"""SQLite has one layout: ``partitioned`` is refused by name (the setting, the CLI flag)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.db import layout
from opensquilla.session.errors import ConfigurationError
from tests.cli.support import cli


def test_the_setting_is_refused_on_sqlite(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="needs PostgreSQL"):
        SessionStorage(tmp_path / "s.db", layout="partitioned:4")
    SessionStorage(tmp_path / "s.db", layout="plain")  # the one SQLite has


def test_the_cli_flag_is_refused_on_sqlite(tmp_path: Path) -> None:
    target = str(tmp_path / "s.db")
    refused = cli(target, "db", "upgrade", "--layout", "partitioned")
    assert refused.exit_code != 0 and "needs PostgreSQL" in refused.output
    assert cli(target, "db", "current").stdout.startswith("none")  # nothing was created
    assert cli(target, "db", "upgrade", "--layout", "plain").exit_code == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", layout.PLAIN),
        ("partitioned", layout.Layout(16)),
        (" Partitioned:8 ", layout.Layout(8)),
    ],
)
def test_layout_values(text: str, expected: layout.Layout) -> None:
    assert layout.parse(text) == expected


@pytest.mark.parametrize("value", ["partitioned:1", "partitioned:x", "sharded", 4, ""])
def test_a_bad_layout_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigurationError, match="layout must be"):
        SessionStorage("postgresql://postgres@127.0.0.1:5432/none", layout=value)  # type: ignore[arg-type]


async def test_the_environment_leaves_sqlite_plain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(layout.LAYOUT_ENV, "partitioned:4")  # a PostgreSQL default only
    async with SessionStorage(tmp_path / "s.db") as storage:
        assert storage.backend == "sqlite"
    monkeypatch.setenv(layout.LAYOUT_ENV, "partitioned:0")
    with pytest.raises(ConfigurationError, match="OPENSQUILLA_SESSION_LAYOUT must be"):
        SessionStorage(tmp_path / "s.db")
