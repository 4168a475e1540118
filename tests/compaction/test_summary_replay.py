"""The summary replay formatter (HEAD-FEATURES §5.8): how compaction summaries read in a
model request, within 16 000 characters."""

from __future__ import annotations

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig, format_compaction_summary_context
from opensquilla.session.compaction.summary_replay import (
    LEGACY_OMITTED,
    MAX_REPLAY_CHARS,
    SECTION_OMITTED,
    STRUCTURED_HEADER,
    split_sections,
)

KEY = "agent:main:replay"


def structured(**sections: str) -> str:
    """A structured summary as upstream renders one: ``user_goal="..."`` -> ``Goal:``."""
    titles = {
        "goal": "Goal",
        "current_status": "Current Status",
        "next_action": "Next Action",
        "pending": "Pending Tool and Approval IDs",
        "carry": "Critical Carry Forward",
    }
    body = "\n\n".join(f"{titles[name]}:\n{text}" for name, text in sections.items())
    return f"{STRUCTURED_HEADER}\n\n{body}"


def words(label: str, count: int) -> str:
    return " ".join(f"{label}{index}" for index in range(count))


def test_compaction_summary_formatter_strips_and_drops_empties_and_duplicates() -> None:
    rendered = format_compaction_summary_context(
        ["  first checkpoint\n", "", "   ", None, "second checkpoint", "first checkpoint"]
    )

    assert rendered == (
        "[Compacted Session Summaries]\n"
        "[Summary 1]\nfirst checkpoint\n\n"
        "[Summary 2]\nsecond checkpoint"
    )
    assert format_compaction_summary_context(["", "  ", None]) is None
    assert format_compaction_summary_context([]) is None


def test_a_replay_at_the_cap_is_left_whole() -> None:
    prefix = len("[Compacted Session Summaries]\n[Summary 1]\n")
    at_cap = "a" * (MAX_REPLAY_CHARS - prefix)

    rendered = format_compaction_summary_context([at_cap])
    over = format_compaction_summary_context([at_cap + "a"])

    assert rendered is not None and len(rendered) == MAX_REPLAY_CHARS
    assert rendered.endswith(at_cap)
    assert over is not None and LEGACY_OMITTED in over and len(over) <= MAX_REPLAY_CHARS


def test_compaction_summary_formatter_caps_structured_summary_by_whole_sections() -> None:
    status = "STATUS_START\n" + "status detail never half replayed. " * 600 + "\nSTATUS_END"
    summary = structured(
        goal="Keep the complete goal.",
        current_status=status,
        next_action="Continue from the checkpoint.",
        pending="- call_pending_1",
        carry="- keep the prompt unchanged",
    )
    assert split_sections(summary) is not None

    rendered = format_compaction_summary_context([summary])

    assert rendered is not None and len(rendered) <= MAX_REPLAY_CHARS
    assert rendered == (
        "[Compacted Session Summaries]\n[Summary 1]\n"
        f"{STRUCTURED_HEADER}\n\n"
        "Goal:\nKeep the complete goal.\n\n"
        f"Current Status:\n{SECTION_OMITTED}\n\n"
        "Next Action:\nContinue from the checkpoint.\n\n"
        "Pending Tool and Approval IDs:\n- call_pending_1\n\n"
        "Critical Carry Forward:\n- keep the prompt unchanged"
    )


def test_sections_are_kept_by_priority_not_by_position() -> None:
    """Room for only one large section: Next Action outranks Current Status, though it is
    rendered after it."""
    large = "n" * 7_000
    summary = structured(current_status="s" * 9_000, next_action=large)

    rendered = format_compaction_summary_context([summary])

    assert rendered is not None
    assert f"Next Action:\n{large}" in rendered
    assert f"Current Status:\n{SECTION_OMITTED}" in rendered


def test_ambiguous_structured_summary_is_dropped_rather_than_cut() -> None:
    """Sections out of order cannot be split safely: the oversized summary is left out
    whole (announced), never cut as legacy text."""
    ambiguous = structured(next_action="x " * 9_000, goal="late goal")
    assert split_sections(ambiguous) is None

    rendered = format_compaction_summary_context([ambiguous])

    assert rendered == (
        "[Compacted Session Summaries]\n[Omitted 1 earlier compaction summary from request "
        "replay to fit the context budget.]"
    )


def test_compaction_summary_formatter_keeps_legacy_head_and_tail_around_the_marker() -> None:
    summary = (
        "LEGACY_GOAL_START keep the original objective.\n"
        + words("history", 3_000)
        + "\nRECENT_STATUS_START continue the pending step. RECENT_STATUS_END"
    )

    rendered = format_compaction_summary_context([summary])

    assert rendered is not None and len(rendered) <= MAX_REPLAY_CHARS
    body = rendered.removeprefix("[Compacted Session Summaries]\n[Summary 1]\n")
    head, tail = body.split(f"\n{LEGACY_OMITTED}\n")
    assert head.startswith("LEGACY_GOAL_START") and summary.startswith(head)
    assert tail.endswith("RECENT_STATUS_END") and summary.endswith(tail)
    assert "RECENT_STATUS_START" in tail
    # A third for the head, the rest for the tail; both cut at whitespace, not in a word.
    assert len(head) < len(tail) and not head[-1].isspace()
    assert tail.startswith("history") and head.split()[-1] in summary.split()


def test_compaction_summary_formatter_counts_omitted_earlier_summaries() -> None:
    oldest = "oldest checkpoint"
    unsplittable = structured(next_action="y " * 4_000, goal="out of order")
    newest = "newest " * 1_300  # about 9 000 characters, whole

    for texts, omitted in (([unsplittable, newest], 1), ([oldest, unsplittable, newest], 2)):
        rendered = format_compaction_summary_context(texts)

        assert rendered is not None and len(rendered) <= MAX_REPLAY_CHARS
        noun = "summary" if omitted == 1 else "summaries"
        number = len(texts)
        assert rendered == (
            "[Compacted Session Summaries]\n"
            f"[Omitted {omitted} earlier compaction {noun} from request replay to fit the "
            "context budget.]\n\n"
            f"[Summary {number}]\n{newest.strip()}"
        )


def test_newest_summary_is_budgeted_first_and_output_stays_chronological() -> None:
    older = "OLD_START " + words("old", 3_000) + " OLD_END"
    newer = structured(goal="Use the newest checkpoint.", current_status="Complete.")

    rendered = format_compaction_summary_context([older, newer])

    assert rendered is not None and len(rendered) <= MAX_REPLAY_CHARS
    assert rendered == format_compaction_summary_context([older, newer])
    assert rendered.endswith(f"[Summary 2]\n{newer}")  # whole
    first = rendered.index("[Summary 1]\nOLD_START")
    assert first < rendered.index("[Summary 2]") and LEGACY_OMITTED in rendered[first:]


async def test_durable_summary_replay_matches_runtime_formatter(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Two compactions, then a new front door over the store: the stored summaries replay
    exactly as the results the compactions returned."""
    await manager.create(KEY)
    results = []
    for round_ in range(2):
        for index in range(12):
            text = f"round {round_} message {index} " + "z" * 400
            await manager.append_message(KEY, "user", text, token_count=200)
        result = await manager.compact_with_result(KEY, 1000, CompactionConfig())
        assert result.removed_count > 0
        results.append(result)

    runtime = format_compaction_summary_context([result.summary for result in results])
    restarted = SessionManager(storage, inject_time_prefix=False)
    durable = format_compaction_summary_context(
        [summary.summary_text for summary in await restarted.get_summaries(KEY)]
    )

    assert durable is not None and durable == runtime
    assert durable == (
        "[Compacted Session Summaries]\n"
        f"[Summary 1]\n{results[0].summary.strip()}\n\n"
        f"[Summary 2]\n{results[1].summary.strip()}"
    )
