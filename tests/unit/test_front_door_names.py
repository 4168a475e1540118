"""The package's front door (issue 32): its version comes from the installed metadata, and
every name it exports is the one object the submodule defines (no copies that could drift)."""

from __future__ import annotations

from importlib.metadata import version

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
