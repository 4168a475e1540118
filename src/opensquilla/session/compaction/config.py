"""Compaction settings (docs/semantics.md#compaction)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator

from ..errors import ConfigurationError
from ..support.settings import Settings

IdentifierPolicy = Literal["strict", "custom", "off"]
IDENTIFIER_POLICIES = frozenset(get_args(IdentifierPolicy))
CutPolicy = Literal["entries", "api_rounds"]
CUT_POLICIES = frozenset(get_args(CutPolicy))
PROFILES_WITH_PROTECTED_TAIL = frozenset({"coding", "research", "support"})
PROFILE_PROTECTED_TAIL = 12


class CompactionConfig(Settings):
    """How compaction sizes chunks, when it triggers, and what it protects.

    The LLM summariser runs only when both ``api_key`` and ``model`` are set; otherwise
    the deterministic fallback summary is used. Checked once, when built
    (``ConfigurationError`` naming the setting), and frozen: ``replace(**changes)`` gives a
    checked copy.
    """

    # ``float | int``: a given int is kept as given (as the dataclass did), not made a float.
    base_chunk_ratio: float | int = 0.4
    min_chunk_ratio: float | int = 0.15
    safety_margin: float | int = 1.2
    default_parts: int = 2
    identifier_policy: IdentifierPolicy | str = "strict"
    model: str | None = None
    # Never in a dump (model_dump, model_dump_json) nor shown by repr()/str() ("***").
    api_key: str = Field(default="", exclude=True)
    base_url: str = "https://openrouter.ai/api/v1"
    timeout_seconds: float | int = 90.0
    coverage_blocking: bool = False
    # Upstream's strict-coverage backfill (docs/semantics.md#verified-backfill): the summary
    # is the structured payload rendered as sections, and under coverage_blocking only a
    # fact that rendering still lacks blocks. Off: the contract's coverage.
    verified_backfill: bool = False
    compaction_profile: str = "conversation"
    protected_recent_messages: int = 0
    # The bound of one whole compaction (read, summarise, commit), in seconds; past it the
    # call raises CompactionTimeoutError and writes nothing (docs/semantics.md#single-flight).
    total_timeout_seconds: float | int = 120.0
    # Workers in other processes compacting the same session wait for the one holding the
    # session's lease in the database; a holder that stops renewing it (a crash) loses it
    # this many seconds after its last renewal. 0: no lease, processes do not coordinate.
    lease_seconds: float | int = 30.0
    # Where the cut may fall (docs/semantics.md#api-rounds): "entries", the contract's
    # per-entry cut (the default), or "api_rounds", upstream's whole API rounds.
    cut_policy: CutPolicy | str = "entries"
    # Under "api_rounds" only: the latest round stays raw while it is still live (an
    # unanswered question, a call without its result, a result still running).
    protect_semantic_tail: bool = True
    # Rolling checkpoints (docs/semantics.md#rolling-checkpoints): the active context records
    # are folded into the new summary, which replaces them (upstream HEAD). Off (the default):
    # the contract's independent summaries (SEMANTICS §8.6, §8.8, §8.9).
    rolling_checkpoints: bool = False

    @field_validator(
        "base_chunk_ratio",
        "min_chunk_ratio",
        "safety_margin",
        "timeout_seconds",
        "total_timeout_seconds",
        "lease_seconds",
        mode="before",
    )
    @classmethod
    def _number(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name
        assert name is not None
        _finite(name, value)
        assert isinstance(value, int | float)
        if name == "base_chunk_ratio" and not 0 < value <= 1:
            raise ConfigurationError(f"base_chunk_ratio must be in (0, 1], not {value!r}")
        if name == "min_chunk_ratio" and not 0 <= value <= 1:
            raise ConfigurationError(f"min_chunk_ratio must be in [0, 1], not {value!r}")
        if name in ("safety_margin", "timeout_seconds", "total_timeout_seconds") and value <= 0:
            raise ConfigurationError(f"{name} must be positive, not {value!r}")
        if name == "lease_seconds" and value < 0:
            raise ConfigurationError(
                f"lease_seconds must be 0 (no lease) or positive, not {value!r}"
            )
        return value

    @field_validator("default_parts", "protected_recent_messages", mode="before")
    @classmethod
    def _count(cls, value: object, info: ValidationInfo) -> object:
        assert info.field_name is not None
        _integer(info.field_name, value, minimum=1 if info.field_name == "default_parts" else 0)
        return value

    @field_validator("identifier_policy", "cut_policy", mode="before")
    @classmethod
    def _policy(cls, value: object, info: ValidationInfo) -> object:
        allowed = IDENTIFIER_POLICIES if info.field_name == "identifier_policy" else CUT_POLICIES
        assert info.field_name is not None
        _choice(info.field_name, value, allowed)
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"model must be a string or None, not {_kind(value)}")
        return value

    @field_validator("api_key", "base_url", "compaction_profile", mode="before")
    @classmethod
    def _text(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            # Never show the value: it may be the API key.
            raise ConfigurationError(
                f"{info.field_name} must be a string, not {type(value).__name__}"
            )
        return value

    @field_validator(
        "coverage_blocking",
        "verified_backfill",
        "protect_semantic_tail",
        "rolling_checkpoints",
        mode="before",
    )
    @classmethod
    def _flag(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, bool):
            raise ConfigurationError(f"{info.field_name} must be True or False, not {_kind(value)}")
        return value

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # repr() and str(): never show the API key.
        for name, value in super().__repr_args__():
            yield name, ("***" if name == "api_key" and value else value)

    @property
    def protected_tail(self) -> int:
        """Recent messages compaction never removes (0 = none)."""
        if self.protected_recent_messages > 0:
            return self.protected_recent_messages
        if self.compaction_profile in PROFILES_WITH_PROTECTED_TAIL:
            return PROFILE_PROTECTED_TAIL
        return 0

    @property
    def chunk_ratio(self) -> float:
        return max(self.min_chunk_ratio, self.base_chunk_ratio / max(1, self.default_parts))

    @property
    def llm_enabled(self) -> bool:
        return bool(self.api_key and self.model)


def _kind(value: object) -> str:
    if value is None or isinstance(value, bool | int | float):
        shown = repr(value)
        return shown if len(shown) <= 40 else f"a {type(value).__name__} of {len(shown)} digits"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


def _finite(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, not {_kind(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise ConfigurationError(f"{name} must be a finite number, not {_kind(value)}")


def _integer(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, not {_kind(value)}")


def _choice(name: str, value: object, allowed: frozenset[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigurationError(
            f"{name} must be one of {', '.join(sorted(allowed))}, not {_kind(value)}"
        )
