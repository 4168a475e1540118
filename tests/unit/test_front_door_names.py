"""The package's front door (issue 32): its version comes from the installed metadata, and
every name it exports is the one object the submodule defines (no copies that could drift)."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

import opensquilla.session as package
from opensquilla.session import compaction, config, errors, llm, sync


def test_version_is_the_distributions() -> None:
    assert package.__version__ == version("opensquilla-session")
    assert package.__version__ != "0+unknown"


def test_every_exported_name_exists() -> None:
    assert len(package.__all__) == len(set(package.__all__))
    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert missing == []


def test_the_exports_are_the_submodules_objects() -> None:
    assert package.CompactionConfig is compaction.CompactionConfig
    assert package.CompactionResult is compaction.CompactionResult
    assert package.format_compaction_summary_context is compaction.format_compaction_summary_context
    assert package.resolve_dsn is config.resolve_dsn
    assert package.MigrationError is errors.MigrationError
    assert package.LLMSettings is llm.LLMSettings
    assert package.SyncSessionManager is sync.SyncSessionManager
    assert package.SyncSessionStorage is sync.SyncSessionStorage


def test_one_default_database_for_the_program_the_cli_and_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's program reads ``resolve_dsn()``; the command line and ``alembic`` resolve
    through the same function, so unset they all name ``<home>/sessions.db``."""
    from opensquilla.session.cli import runtime
    from opensquilla.session.db import alembic_cli

    monkeypatch.delenv(config.DSN_ENV, raising=False)
    monkeypatch.setenv(config.STATE_DIR_ENV, str(tmp_path / "state"))
    default = str(tmp_path / "state" / "sessions.db")
    assert package.resolve_dsn() == default
    assert alembic_cli.cli_dsn({}) == default
    assert runtime.resolve_dsn is config.resolve_dsn  # the CLI's dsn() calls it
    monkeypatch.setenv(config.DSN_ENV, "postgresql://app@db/sessions")
    assert package.resolve_dsn() == alembic_cli.cli_dsn({}) == "postgresql://app@db/sessions"
