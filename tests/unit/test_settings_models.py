"""Settings are pydantic models checked once, when built (``support/settings.py``):
``CompactionConfig``, the engine options and the storage's own settings refuse a bad value
with the package's ``ConfigurationError`` naming it (never pydantic's ``ValidationError``),
and cannot change afterwards."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pydantic
import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.db.engine_options import EngineSettings, check_engine_options
from opensquilla.session.db.lifecycle import ArchiveSettings, StorageSettings
from opensquilla.session.errors import ConfigurationError

SECRET = "sk-never-shown-0123456789"


def test_compaction_config_is_a_frozen_checked_model() -> None:
    config = CompactionConfig(safety_margin=2, api_key=SECRET, model="m")
    assert isinstance(config, pydantic.BaseModel)
    assert config.safety_margin == 2 and config.llm_enabled
    for attempt in (
        lambda: setattr(config, "safety_margin", math.nan),
        lambda: setattr(config, "api_key", ""),
        lambda: delattr(config, "model"),
    ):
        with pytest.raises(ConfigurationError, match="cannot be changed once built"):
            attempt()
    assert (config.safety_margin, config.api_key, config.model) == (2.0, SECRET, "m")
    # equal by value and hashable, as a frozen value should be
    assert config == CompactionConfig(safety_margin=2, api_key=SECRET, model="m")
    assert len({config, CompactionConfig(safety_margin=2, api_key=SECRET, model="m")}) == 1


def test_a_changed_copy_is_checked_like_a_new_config() -> None:
    config = CompactionConfig(default_parts=3)
    changed = config.replace(protected_recent_messages=4)
    assert (changed.default_parts, changed.protected_recent_messages) == (3, 4)
    assert config.protected_recent_messages == 0
    with pytest.raises(ConfigurationError, match="protected_recent_messages"):
        config.replace(protected_recent_messages=-1)
    with pytest.raises(ConfigurationError, match="unknown CompactionConfig setting"):
        config.replace(no_such_setting=1)


def test_the_api_key_is_never_shown() -> None:
    config = CompactionConfig(api_key=SECRET, model="m")
    assert SECRET not in repr(config) and SECRET not in str(config) and SECRET not in f"{config}"
    assert "api_key='***'" in repr(config)
    with pytest.raises(ConfigurationError) as caught:
        CompactionConfig(api_key=12345)  # type: ignore[arg-type]
    assert "12345" not in str(caught.value)
    assert caught.value.__suppress_context__  # pydantic's error (with the value) not shown


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_chunk_ratio": 1.5}, r"base_chunk_ratio must be in \(0, 1\], not 1.5"),
        ({"lease_seconds": -1}, "lease_seconds must be 0 .no lease. or positive"),
        ({"cut_policy": "rounds"}, "cut_policy must be one of api_rounds, entries"),
        ({"rolling_checkpoints": 1}, "rolling_checkpoints must be True or False, not 1"),
        ({"timeout": 5}, "unknown CompactionConfig setting.s.: timeout"),
    ],
)
def test_compaction_config_refusals_are_configuration_errors(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        CompactionConfig(**options)
    assert not isinstance(caught.value, pydantic.ValidationError)
    with pytest.raises(ConfigurationError, match=message):
        CompactionConfig.model_validate(options)


def test_engine_options_are_a_checked_model_per_backend() -> None:
    settings = check_engine_options(
        {"pool_size": 3, "max_overflow": "2", "pool_pre_ping": False},
        backend="postgresql",
        memory=False,
    )
    assert isinstance(settings, EngineSettings)
    assert settings.options() == {"pool_size": 3, "max_overflow": 2, "pool_pre_ping": False}
    with pytest.raises(ConfigurationError, match="cannot be changed once built"):
        settings.pool_size = 10  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="':memory:' has one connection and no pool"):
        check_engine_options({"pool_size": 3}, backend="sqlite", memory=True)
    with pytest.raises(ConfigurationError, match=r"poolclass: set by the store itself"):
        check_engine_options({"poolclass": object}, backend="postgresql", memory=False)


def test_storage_settings_are_checked_once_when_the_storage_is_built(tmp_path: Path) -> None:
    settings = StorageSettings(sqlite_synchronous="normal")  # type: ignore[arg-type]
    archives = ArchiveSettings(archive_store="database")
    assert (settings.sqlite_synchronous, settings.create, archives.archive_store) == (
        "NORMAL",
        True,
        "database",
    )
    with pytest.raises(ConfigurationError, match="archive_store must be one of files, database"):
        SessionStorage(tmp_path / "never.db", archive_store="tape")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="sqlite_synchronous must be one of"):
        SessionStorage(tmp_path / "never.db", sqlite_synchronous="SOMETIMES")  # type: ignore[arg-type]
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(
    "build",
    [
        lambda c: c.model_copy(update={"base_chunk_ratio": -5.0}),
        lambda c: c.model_copy(update={"default_parts": "two"}),
        lambda c: CompactionConfig.model_construct(base_chunk_ratio="x"),
        lambda c: CompactionConfig.model_construct(lease_seconds=-1),
    ],
    ids=["model_copy ratio", "model_copy parts", "model_construct ratio", "model_construct lease"],
)
def test_no_way_around_the_check(build: Any) -> None:
    """``model_copy(update=...)`` and ``model_construct(...)`` are checked as a new
    config is (``ConfigurationError``), never built unchecked."""
    with pytest.raises(ConfigurationError):
        build(CompactionConfig())


def test_model_copy_and_construct_still_build_good_configs() -> None:
    config = CompactionConfig(base_chunk_ratio=0.5)
    assert config.model_copy() == config
    assert config.model_copy(update={"default_parts": 3}) == config.replace(default_parts=3)
    assert CompactionConfig.model_construct(default_parts=3) == CompactionConfig(default_parts=3)


def test_the_api_key_is_in_no_dump_repr_or_error() -> None:
    config = CompactionConfig(api_key=SECRET, model="m")
    shown = [
        repr(config),
        str(config),
        str(config.model_dump()),
        config.model_dump_json(),
        str(config.model_dump(mode="json")),
    ]
    for text in shown:
        assert SECRET not in text
    assert "api_key" not in config.model_dump()
    assert str(config).startswith("CompactionConfig(") and "api_key='***'" in str(config)
    with pytest.raises(ConfigurationError) as caught:
        CompactionConfig(api_key=SECRET, base_chunk_ratio="x")
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)
    assert config.api_key == SECRET  # still there for the summariser


def test_validate_is_kept_for_compatibility() -> None:
    """``config.validate()`` (the dataclass's) re-checks and returns ``None``."""
    assert CompactionConfig(default_parts=3).validate() is None


def test_a_bad_target_is_named_before_a_bad_archive_store() -> None:
    """As before the settings models: the target is parsed and checked first."""
    with pytest.raises(ConfigurationError) as caught:
        SessionStorage("mysql://x", archive_store="bogus")  # type: ignore[arg-type]
    assert "archive_store" not in str(caught.value) and "mysql" in str(caught.value)


def test_a_given_int_is_kept() -> None:
    """As the dataclass kept it: ``lease_seconds=30`` stays the int 30."""
    config = CompactionConfig(lease_seconds=30, safety_margin=2, timeout_seconds=1.5)
    assert type(config.lease_seconds) is int and config.lease_seconds == 30
    assert type(config.safety_margin) is int
    assert type(config.timeout_seconds) is float


def test_engine_settings_are_hashable_and_their_connect_args_read_only() -> None:
    given = {"server_settings": {"application_name": "x"}, "command_timeout": 5}
    settings = EngineSettings(connect_args=given, pool_size=3)
    given["command_timeout"] = 99  # the caller's dict is not the settings'
    assert settings.connect_args is not None and settings.connect_args["command_timeout"] == 5
    with pytest.raises(TypeError):
        settings.connect_args["command_timeout"] = 1  # type: ignore[index]
    same_settings = EngineSettings(connect_args={**given, "command_timeout": 5}, pool_size=3)
    assert settings == same_settings and hash(settings) == hash(same_settings)
    assert len({settings, same_settings}) == 1


def test_the_engine_options_are_declared_once() -> None:
    """``EngineSettings``' fields are made from the ``EngineOptions`` TypedDict, each option
    with its check: the same names, in the same order, and a bad value of every option is
    refused by its own check, naming it."""
    from opensquilla.session.db import engine_options

    names = list(engine_options.EngineOptions.__annotations__)
    assert list(EngineSettings.model_fields) == names
    for name in names:
        with pytest.raises(ConfigurationError, match=name):
            EngineSettings(**{name: object()})
        assert EngineSettings.model_fields[name].default is None  # not given: SQLAlchemy's
