"""Compaction settings (docs/semantics.md#compaction)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from ..errors import ConfigurationError

IdentifierPolicy = Literal["strict", "custom", "off"]
IDENTIFIER_POLICIES = frozenset(get_args(IdentifierPolicy))
CutPolicy = Literal["entries", "api_rounds"]
CUT_POLICIES = frozenset(get_args(CutPolicy))
PROFILES_WITH_PROTECTED_TAIL = frozenset({"coding", "research", "support"})
PROFILE_PROTECTED_TAIL = 12


@dataclass
class CompactionConfig:
    """How compaction sizes chunks, when it triggers, and what it protects.

    The LLM summariser runs only when both ``api_key`` and ``model`` are set; otherwise
    the deterministic fallback summary is used.
    """

    base_chunk_ratio: float = 0.4
    min_chunk_ratio: float = 0.15
    safety_margin: float = 1.2
    default_parts: int = 2
    identifier_policy: IdentifierPolicy | str = "strict"
    model: str | None = None
    api_key: str = ""
    base_url: str = "https://openrouter.ai/api/v1"
    timeout_seconds: float = 90.0
    coverage_blocking: bool = False
    # Upstream's strict-coverage backfill (docs/semantics.md#verified-backfill): the summary
    # is the structured payload rendered as sections, and under coverage_blocking only a
    # fact that rendering still lacks blocks. Off: the contract's coverage.
    verified_backfill: bool = False
    compaction_profile: str = "conversation"
    protected_recent_messages: int = 0
    # The bound of one whole compaction (read, summarise, commit), in seconds; past it the
    # call raises CompactionTimeoutError and writes nothing (docs/semantics.md#single-flight).
    total_timeout_seconds: float = 120.0
    # Workers in other processes compacting the same session wait for the one holding the
    # session's lease in the database; a holder that stops renewing it (a crash) loses it
    # this many seconds after its last renewal. 0: no lease, processes do not coordinate.
    lease_seconds: float = 30.0
    # Where the cut may fall (docs/semantics.md#api-rounds): "entries", the contract's
    # per-entry cut (the default), or "api_rounds", upstream's whole API rounds.
    cut_policy: CutPolicy | str = "entries"
    # Under "api_rounds" only: the latest round stays raw while it is still live (an
    # unanswered question, a call without its result, a result still running).
    protect_semantic_tail: bool = True
    # Rolling checkpoints (docs/semantics.md#rolling-checkpoints): the active context records
    # are folded into the new summary, which replaces them (upstream HEAD; the contract passes
    # with it on or off, so HEAD's behaviour is the default). Off: independent summaries.
    rolling_checkpoints: bool = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a setting compaction cannot use (``ConfigurationError`` naming it).

        Run at construction and again by every compaction, since the dataclass is mutable.
        """
        for name in (
            "base_chunk_ratio",
            "min_chunk_ratio",
            "safety_margin",
            "timeout_seconds",
            "total_timeout_seconds",
            "lease_seconds",
        ):
            _finite(name, getattr(self, name))
        if not 0 < self.base_chunk_ratio <= 1:
            raise ConfigurationError(
                f"base_chunk_ratio must be in (0, 1], not {self.base_chunk_ratio!r}"
            )
        if not 0 <= self.min_chunk_ratio <= 1:
            raise ConfigurationError(
                f"min_chunk_ratio must be in [0, 1], not {self.min_chunk_ratio!r}"
            )
        for name in ("safety_margin", "timeout_seconds", "total_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.lease_seconds < 0:
            raise ConfigurationError(
                f"lease_seconds must be 0 (no lease) or positive, not {self.lease_seconds!r}"
            )
        _integer("default_parts", self.default_parts, minimum=1)
        _integer("protected_recent_messages", self.protected_recent_messages, minimum=0)
        _choice("identifier_policy", self.identifier_policy, IDENTIFIER_POLICIES)
        _choice("cut_policy", self.cut_policy, CUT_POLICIES)
        if self.model is not None and not isinstance(self.model, str):
            raise ConfigurationError(f"model must be a string or None, not {_kind(self.model)}")
        for name in ("api_key", "base_url", "compaction_profile"):
            if not isinstance(getattr(self, name), str):
                # Never show the value: it may be the API key.
                raise ConfigurationError(
                    f"{name} must be a string, not {type(getattr(self, name)).__name__}"
                )
        for name in (
            "coverage_blocking",
            "verified_backfill",
            "protect_semantic_tail",
            "rolling_checkpoints",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"{name} must be True or False, not {_kind(getattr(self, name))}"
                )

    def __repr__(self) -> str:
        # Never show the API key.
        shown = {k: ("***" if k == "api_key" and v else v) for k, v in self.__dict__.items()}
        return "CompactionConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

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
