"""Obligations: the facts a summary must keep, and whether it did (docs/semantics.md#coverage).

Obligations are extracted from the entries a compaction removes. A summary *covers* one
when its case-folded text contains the obligation's case-folded value. What it misses is
carried forward verbatim (backfill) or, under ``coverage_blocking``, blocks the rewrite.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_OBLIGATIONS = 64
MAX_VALUE_CHARS = 240
MAX_CARRY_FORWARD = 32

USER_GOAL = "user_goal"
USER_CONSTRAINT = "user_constraint_or_preference"
DECISION = "decision_or_rationale"
NEXT_ACTION = "current_plan_or_next_action"
DO_NOT_REPEAT = "do_not_repeat_action"
ARTIFACT = "artifact_path_or_name"
QUESTION = "unresolved_question"
FAILURE = "failed_command_or_error"
TOOL_RESULT_ID = "tool_result_id"
TOOL_RESULT_FACT = "tool_result_fact"
IDENTIFIER = "important_identifier"
FILE_PATH = "file_path"
COMMAND = "command"

_GOAL_PREFIXES = ("goal:", "objective:", "目标:")
_CONSTRAINT_PREFIXES = ("constraint:", "constraints:", "限制:", "要求:")
_DECISION_PREFIXES = ("decision:", "rationale:", "reason:", "decided:", "决定:", "原因:")
_NEXT_MARKERS = ("next i will", "next step", "下一步", "i will ", "我会")
_DO_NOT_REPEAT_MARKERS = ("do not repeat", "don't repeat", "不要重复", "不要再")
_ARTIFACT_MARKERS = ("artifact", "generated artifact", "附件", "产物")
_FAILURE_MARKERS = ("error", "failed", "failure", "traceback", "exit code", "exception")
_ARTIFACT_EXTENSIONS = (
    "pdf|png|jpg|jpeg|gif|csv|json|md|txt|xls|xlsx|ppt|pptx|doc|docx|htm|html|zip"
)

_WHITESPACE = re.compile(r"\s+")
_TRIM = " `\t\r\n,;)]"
_ARTIFACT_NAME = re.compile(
    rf"(?<![\w/\\.-])[\w.-]+\.(?:{_ARTIFACT_EXTENSIONS})(?![\w/\\])", re.IGNORECASE
)
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_HEX_RUN = re.compile(r"\b[0-9a-fA-F]{12,64}\b")
# Permissive on purpose: relative, absolute, ./ ../ and drive-letter paths whose later
# segments may hold spaces ("docs/Long Task Report.md"); trimmed back to the last extension.
_PATH = re.compile(r"(?<![\w.\-/\\])(?:[A-Za-z]:[\\/]|\.{1,2}/|/)?[\w.\-]+(?:[\\/][\w .\-]+)+")
_EXTENSION_END = re.compile(r"\.[A-Za-z0-9]{1,10}(?=[\s.,;:)\]]|$)")
_COMMAND = re.compile(
    r"(?<![\w-])(?:uv run )?(?:pytest|ruff|python|mypy|pyright|npm|pnpm|yarn|git|bash|sh|make"
    r"|cargo|go test)\b[^\n]{0,220}"
)


@dataclass(frozen=True)
class Obligation:
    kind: str
    value: str
    source_role: str | None = None
    source_id: int | None = None
    critical: bool = True

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.value}"


def clean(value: str) -> str:
    text = _WHITESPACE.sub(" ", value).strip(_TRIM)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 3] + "..."
    return text


def _after_colon(line: str) -> str:
    for colon in (":", "："):
        if colon in line:
            return line.split(colon, 1)[1]
    return line


def file_paths(text: str) -> list[str]:
    found = []
    for match in _PATH.finditer(text):
        candidate = match.group(0)
        ends = list(_EXTENSION_END.finditer(candidate))
        if not ends:
            continue
        path = candidate[: ends[-1].end()]
        if "/" in path or "\\" in path:
            found.append(path)
    return found


class _Collector:
    def __init__(self) -> None:
        self.items: list[Obligation] = []
        self._seen: set[tuple[str, str]] = set()

    @property
    def full(self) -> bool:
        return len(self.items) >= MAX_OBLIGATIONS

    def add(self, kind: str, raw: Any, role: str | None, source_id: int | None) -> None:
        if self.full or raw is None:
            return
        value = clean(raw if isinstance(raw, str) else str(raw))
        if not value:
            return
        key = (kind, value.casefold())
        if key in self._seen:
            return
        self._seen.add(key)
        self.items.append(Obligation(kind, value, role, source_id))


def _scan_line(out: _Collector, line: str, role: str | None, source_id: int | None) -> None:
    folded = line.casefold()
    if role == "user" and folded.startswith(_GOAL_PREFIXES):
        out.add(USER_GOAL, _after_colon(line), role, source_id)
    if role == "user" and folded.startswith(_CONSTRAINT_PREFIXES):
        out.add(USER_CONSTRAINT, _after_colon(line), role, source_id)
    if folded.startswith(_DECISION_PREFIXES):
        out.add(DECISION, _after_colon(line), role, source_id)
    if role == "assistant" and any(marker in folded for marker in _NEXT_MARKERS):
        out.add(NEXT_ACTION, line, role, source_id)
    if any(marker in folded for marker in _DO_NOT_REPEAT_MARKERS):
        out.add(DO_NOT_REPEAT, line, role, source_id)
    if any(marker in folded for marker in _ARTIFACT_MARKERS):
        for name in _ARTIFACT_NAME.findall(line):
            out.add(ARTIFACT, name, role, source_id)
    if "?" in line or "？" in line:
        out.add(QUESTION, line, role, source_id)
    if any(marker in folded for marker in _FAILURE_MARKERS):
        out.add(FAILURE, line, role, source_id)


def extract_obligations(
    entries: Sequence[Mapping[str, Any]], entry_ids: Sequence[int | None] | None = None
) -> list[Obligation]:
    """Obligations of the removed entries, in order, deduplicated, at most 64."""
    out = _Collector()
    for position, entry in enumerate(entries):
        if out.full:
            break
        role = entry.get("role")
        source_id = entry_ids[position] if entry_ids is not None else entry.get("id")
        if not isinstance(source_id, int):
            source_id = None
        out.add(TOOL_RESULT_ID, entry.get("tool_call_id"), role, source_id)
        content = entry.get("content")
        text = content if isinstance(content, str) else ""
        for raw_line in text.splitlines():
            line = _WHITESPACE.sub(" ", raw_line).strip()
            if line:
                _scan_line(out, line, role, source_id)
        for call in entry.get("tool_calls") or []:
            if not isinstance(call, Mapping):
                continue
            out.add(TOOL_RESULT_ID, call.get("id") or call.get("tool_use_id"), role, source_id)
            if call.get("type") == "tool_result" or "result" in call:
                fact = call.get("result", call.get("content"))
                out.add(TOOL_RESULT_FACT, fact, role, source_id)
        uuids = _UUID.findall(text)
        for identifier in uuids + _HEX_RUN.findall(_UUID.sub(" ", text) if uuids else text):
            out.add(IDENTIFIER, identifier, role, source_id)
        for path in file_paths(text):
            out.add(FILE_PATH, path, role, source_id)
        for command in _COMMAND.findall(text):
            out.add(COMMAND, command, role, source_id)
    return out.items


@dataclass(frozen=True)
class Coverage:
    status: str
    checked: int
    covered: int
    missing: list[str]
    carry_forward: list[str]


def check_coverage(
    summary: str, obligations: Sequence[Obligation], *, blocking: bool, backfill: bool = True
) -> Coverage:
    """Which obligations ``summary`` covers, and the resulting status."""
    search = summary.casefold()
    missing = [o.label for o in obligations if o.value.casefold() not in search]
    if not obligations:
        status = "unknown"
    elif blocking and missing:
        status = "fail_blocked"
    elif not missing:
        status = "pass"
    elif backfill:
        status = "pass_with_backfill"
    else:
        status = "fail_reported"
    carry = missing[:MAX_CARRY_FORWARD] if (backfill or blocking) and missing else []
    return Coverage(status, len(obligations), len(obligations) - len(missing), missing, carry)
