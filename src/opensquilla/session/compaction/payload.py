"""The structured summary payload, schema version 1 (docs/semantics.md#coverage)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from . import obligations as ob


class SourceCoverage(BaseModel):
    # Defaults only for reading a payload that lacks them (a caller's or an older one);
    # build_payload always sets all three.
    status: str = "unknown"
    checked_obligations: int = 0
    covered_obligations: int = 0


class StructuredSummaryV1(BaseModel):
    """What a compaction remembers, as data: every key is always present, in this order
    (the two verified-backfill keys only under verified backfill)."""

    schema_version: int = 1
    user_goal: str = ""
    current_status: str = ""
    next_action: str | None = None
    completed_steps: list[str] = Field(default_factory=list)
    open_steps: list[str] = Field(default_factory=list)
    files_and_artifacts: list[dict[str, str]] = Field(default_factory=list)
    tool_results_to_remember: list[dict[str, str]] = Field(default_factory=list)
    decisions_and_rationale: list[dict[str, str]] = Field(default_factory=list)
    known_failures: list[dict[str, str]] = Field(default_factory=list)
    # Verified backfill only (HEAD-FEATURES §5.9): left out of the contract's payload.
    executed_commands_and_tests: list[str] = Field(default_factory=list)
    pending_tool_and_approval_ids: list[str] = Field(default_factory=list)
    important_identifiers: list[str] = Field(default_factory=list)
    constraints_and_preferences: list[str] = Field(default_factory=list)
    do_not_repeat: list[str] = Field(default_factory=list)
    unresolved_questions: list[str] = Field(default_factory=list)
    critical_carry_forward: list[str] = Field(default_factory=list)
    source_coverage: SourceCoverage = Field(default_factory=SourceCoverage)


_VERIFIED_ONLY = frozenset({"executed_commands_and_tests", "pending_tool_and_approval_ids"})


def source_coverage(coverage: ob.Coverage) -> SourceCoverage:
    return SourceCoverage(
        status=coverage.status,
        checked_obligations=coverage.checked,
        covered_obligations=coverage.covered,
    )


def build_payload(
    summary: str,
    obligations: Sequence[ob.Obligation],
    coverage: ob.Coverage,
    *,
    verified: bool = False,
    pending: Sequence[str] = (),
) -> dict[str, Any]:
    """The payload of ``summary``. ``verified`` (verified backfill): ``user_goal`` is the
    newest goal, ``open_steps`` every next action, and the commands and the ``pending`` call
    ids are listed; otherwise the contract's payload (the first goal, no such keys)."""

    def values(kind: str) -> list[str]:
        return [o.value for o in obligations if o.kind == kind]

    goals = values(ob.USER_GOAL)
    plans = values(ob.NEXT_ACTION)
    payload = StructuredSummaryV1(
        user_goal=(goals[-1] if verified else goals[0]) if goals else "",
        current_status=summary,
        next_action=plans[0] if plans else None,
        open_steps=plans if verified else [],
        files_and_artifacts=[{"path": v} for v in values(ob.FILE_PATH)]
        + [{"artifact": v} for v in values(ob.ARTIFACT)],
        tool_results_to_remember=[{"id": v} for v in values(ob.TOOL_RESULT_ID)]
        + [{"fact": v} for v in values(ob.TOOL_RESULT_FACT)],
        decisions_and_rationale=[{"detail": v} for v in values(ob.DECISION)],
        known_failures=[{"detail": v} for v in values(ob.FAILURE)],
        important_identifiers=values(ob.IDENTIFIER),
        constraints_and_preferences=values(ob.USER_CONSTRAINT),
        do_not_repeat=values(ob.DO_NOT_REPEAT),
        unresolved_questions=values(ob.QUESTION),
        executed_commands_and_tests=values(ob.COMMAND),
        pending_tool_and_approval_ids=list(pending),
        critical_carry_forward=list(coverage.carry_forward),
        source_coverage=source_coverage(coverage),
    )
    return payload.model_dump(exclude=None if verified else set(_VERIFIED_ONLY))
