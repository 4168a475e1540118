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

from .tool_payload import call_id

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
# A name that may hold spaces: quoted anywhere on the line, or the whole value after a colon
# ("Artifact: final continuity report.pdf.").
_SPACED_NAME = rf"[\w.-]+(?: [\w.-]+)*\.(?:{_ARTIFACT_EXTENSIONS})"
_QUOTED_ARTIFACT = re.compile(rf"([\"'`“‘])({_SPACED_NAME})[\"'`”’]", re.IGNORECASE)
_LABELLED_ARTIFACT = re.compile(rf"\s*({_SPACED_NAME})[\s.,;:)\]]*", re.IGNORECASE)
UUID_RE = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
HEX_RUN_RE = re.compile(r"\b[0-9a-fA-F]{12,64}\b")
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


def artifact_names(line: str) -> list[str]:
    """File names with a known extension on an artifact line. A name may hold spaces when
    it is quoted, or is the whole value after the first colon and the only file named there
    ("Artifact: final report.pdf."); otherwise it is one word."""
    spans: list[tuple[int, int]] = []
    names: list[str] = []
    for match in _QUOTED_ARTIFACT.finditer(line):
        spans.append(match.span(2))
        names.append(match.group(2))
    for colon in (":", "："):
        start = line.find(colon)
        if start < 0:
            continue
        labelled = _LABELLED_ARTIFACT.fullmatch(line, start + 1)
        if (
            labelled
            and " " in labelled.group(1)
            and len(_ARTIFACT_NAME.findall(labelled.group(1))) == 1
        ):
            spans.append(labelled.span(1))
            names.append(labelled.group(1))
        break
    for match in _ARTIFACT_NAME.finditer(line):
        if not any(a <= match.start() and match.end() <= b for a, b in spans):
            names.append(match.group(0))
    return names


_FIRST_WHEN_CAPPED = (USER_GOAL, USER_CONSTRAINT)


class _Collector:
    """Obligations in order, deduplicated, up to ``limit``. Once full it still takes goals
    and constraints (aside), so a capped extraction can put them first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: list[Obligation] = []
        self.aside: list[Obligation] = []
        self._seen: set[tuple[str, str]] = set()

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit

    def add(self, kind: str, raw: Any, role: str | None, source_id: int | None) -> None:
        if raw is None or (self.full and kind not in _FIRST_WHEN_CAPPED):
            return
        value = clean(raw if isinstance(raw, str) else str(raw))
        if not value:
            return
        key = (kind, value.casefold())
        if key in self._seen:
            return
        self._seen.add(key)
        (self.aside if self.full else self.items).append(Obligation(kind, value, role, source_id))

    def result(self) -> list[Obligation]:
        """Under the cap: in order. At the cap: goals and constraints first (in order),
        then the rest in order, cut to the cap."""
        if not self.full:
            return self.items
        first = [o for o in self.items + self.aside if o.kind in _FIRST_WHEN_CAPPED]
        rest = [o for o in self.items if o.kind not in _FIRST_WHEN_CAPPED]
        return (first + rest)[: self.limit]


def _scan_line(out: _Collector, line: str, role: str | None, source_id: int | None) -> None:
    folded = line.casefold()
    if role == "user" and folded.startswith(_GOAL_PREFIXES):
        out.add(USER_GOAL, _after_colon(line), role, source_id)
    if role == "user" and folded.startswith(_CONSTRAINT_PREFIXES):
        out.add(USER_CONSTRAINT, _after_colon(line), role, source_id)
    if out.full:
        return
    if folded.startswith(_DECISION_PREFIXES):
        out.add(DECISION, _after_colon(line), role, source_id)
    if role == "assistant" and any(marker in folded for marker in _NEXT_MARKERS):
        out.add(NEXT_ACTION, line, role, source_id)
    if any(marker in folded for marker in _DO_NOT_REPEAT_MARKERS):
        out.add(DO_NOT_REPEAT, line, role, source_id)
    if any(marker in folded for marker in _ARTIFACT_MARKERS):
        for name in artifact_names(line):
            out.add(ARTIFACT, name, role, source_id)
    if "?" in line or "？" in line:
        out.add(QUESTION, line, role, source_id)
    if any(marker in folded for marker in _FAILURE_MARKERS):
        out.add(FAILURE, line, role, source_id)


def extract_obligations(
    entries: Sequence[Mapping[str, Any]],
    entry_ids: Sequence[int | None] | None = None,
    *,
    max_obligations: int = MAX_OBLIGATIONS,
) -> list[Obligation]:
    """Obligations of the removed entries, in order, deduplicated, at most
    ``max_obligations``; when that cap is reached, goals and constraints come first
    (including those found after it was reached)."""
    out = _Collector(max_obligations)
    for position, entry in enumerate(entries):
        role = entry.get("role")
        if out.full:
            if role == "user":
                _scan_goals(out, entry, entry_ids, position)
            continue
        source_id = _source_id(entry, entry_ids, position)
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
            out.add(TOOL_RESULT_ID, call_id(call), role, source_id)
            if call.get("type") == "tool_result" or "result" in call:
                fact = call.get("result", call.get("content"))
                out.add(TOOL_RESULT_FACT, fact, role, source_id)
        uuids = UUID_RE.findall(text)
        for identifier in uuids + HEX_RUN_RE.findall(UUID_RE.sub(" ", text) if uuids else text):
            out.add(IDENTIFIER, identifier, role, source_id)
        for path in file_paths(text):
            out.add(FILE_PATH, path, role, source_id)
        for command in _COMMAND.findall(text):
            out.add(COMMAND, command, role, source_id)
    return out.result()


def _source_id(
    entry: Mapping[str, Any], entry_ids: Sequence[int | None] | None, position: int
) -> int | None:
    source_id = entry_ids[position] if entry_ids is not None else entry.get("id")
    return source_id if isinstance(source_id, int) else None


def _scan_goals(
    out: _Collector,
    entry: Mapping[str, Any],
    entry_ids: Sequence[int | None] | None,
    position: int,
) -> None:
    """Past the cap only goals and constraints are still looked for."""
    content = entry.get("content")
    if not isinstance(content, str) or ":" not in content:  # every prefix ends in ":"
        return
    source_id = _source_id(entry, entry_ids, position)
    for raw_line in content.splitlines():
        line = _WHITESPACE.sub(" ", raw_line).strip()
        if line:
            _scan_line(out, line, "user", source_id)


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
