"""Compaction summaries: index assignment, reads, flush-receipt status, the repair queue
(SEMANTICS §2.4, §4, §10)."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import SessionNode, SessionSummary

from . import add_summary, count_rows, new_session

KEY = "agent:main:main"


async def test_compaction_index_counts_per_session_and_ignores_the_caller(
    storage: SessionStorage,
) -> None:
    one = await new_session(storage, "agent:main:one")
    two = await new_session(storage, "agent:main:two")
    first = await add_summary(storage, one, "a", compaction_index=7)
    assert (first.compaction_index, isinstance(first.id, int)) == (0, True)
    assert (await add_summary(storage, one, "b", compaction_index=0)).compaction_index == 1
    assert (await add_summary(storage, two, "other")).compaction_index == 0
    assert (await add_summary(storage, one, "c", compaction_index=1)).compaction_index == 2
    assert (await add_summary(storage, two, "other 2", compaction_index=99)).compaction_index == 1
    assert [s.compaction_index for s in await storage.get_all_summaries(one.session_id)] == [
        0,
        1,
        2,
    ]


async def test_save_summary_returns_the_same_object_with_an_id(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    summary = SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="t")
    saved = await storage.save_summary(summary)
    assert saved is summary
    assert summary.id is not None
    other = await add_summary(storage, node, "u")
    assert other.id is not None and other.id > summary.id


async def test_every_field_round_trips(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    summary = await add_summary(
        storage,
        node,
        "the gist",
        compaction_id="cmp_0123456789abcdef0123456789abcdef",
        trigger_reason="preflight_compaction",
        summary_payload={"schema_version": 1, "files": ["a.py"], "nested": {"k": [1, None]}},
        summary_format="structured_v1",
        summary_source="fallback",
        coverage_status="pass",
        missing_obligations=[],
        critical_carry_forward=["keep this"],
        tokens_before=1000,
        tokens_after=200,
        removed_count=18,
        kept_count=2,
        chunk_count=3,
        flush_receipt_status="safe",
        covered_through_id=42,
        created_at=1_700_000_000_000,
        schema_version=1,
    )
    [stored] = await storage.get_all_summaries(node.session_id)
    assert stored == summary
    assert stored.missing_obligations == []  # an empty list is not NULL


async def test_summaries_order_and_latest(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    assert await storage.get_all_summaries(node.session_id) == []
    assert await storage.get_latest_summary(node.session_id) is None
    # created_at deliberately disagrees with the insertion order: the index rules.
    for text, created in (("first", 300), ("second", 200), ("third", 100)):
        await add_summary(storage, node, text, created_at=created)
    texts = [s.summary_text for s in await storage.get_all_summaries(node.session_id)]
    assert texts == ["first", "second", "third"]
    latest = await storage.get_latest_summary(node.session_id)
    assert latest is not None
    assert (latest.summary_text, latest.compaction_index) == ("third", 2)


async def test_summaries_are_per_session_id(storage: SessionStorage) -> None:
    one = await new_session(storage, "agent:main:one")
    two = await new_session(storage, "agent:main:two")
    await add_summary(storage, one, "for one")
    latest_two = await storage.get_latest_summary(two.session_id)
    assert latest_two is None
    assert [s.summary_text for s in await storage.get_all_summaries(one.session_id)] == ["for one"]


async def test_delete_summaries(storage: SessionStorage) -> None:
    one = await new_session(storage, "agent:main:one")
    two = await new_session(storage, "agent:main:two")
    await add_summary(storage, one, "x")
    await add_summary(storage, one, "y")
    await add_summary(storage, two, "z")
    await storage.delete_summaries(one.session_id)
    assert await storage.get_all_summaries(one.session_id) == []
    assert len(await storage.get_all_summaries(two.session_id)) == 1


# -- flush-receipt status ----------------------------------------------------------------


async def test_update_flush_receipt_status_by_id(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    target = await add_summary(storage, node, "a")
    bystander = await add_summary(storage, node, "b")
    assert target.id is not None
    assert await storage.update_summary_flush_receipt_status(target.id, "repaired") == 1
    statuses = {
        s.id: s.flush_receipt_status for s in await storage.get_all_summaries(node.session_id)
    }
    assert statuses == {target.id: "repaired", bystander.id: "unknown"}
    assert await storage.update_summary_flush_receipt_status(10_000_000, "x") == 0


async def test_update_flush_receipt_status_by_compaction(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    other = await new_session(storage, "agent:main:other")
    await add_summary(
        storage, node, "a", compaction_id="cmp_1", flush_receipt_status="degraded_forensic"
    )
    await add_summary(
        storage, node, "b", compaction_id="cmp_2", flush_receipt_status="degraded_forensic"
    )
    await add_summary(
        storage, other, "c", compaction_id="cmp_1", flush_receipt_status="degraded_forensic"
    )

    changed = await storage.update_summary_flush_receipt_status_by_compaction(
        "agent:MAIN:main", "cmp_1", "safe"
    )
    assert changed == 1
    by_text = {
        s.summary_text: s.flush_receipt_status
        for session_id in (node.session_id, other.session_id)
        for s in await storage.get_all_summaries(session_id)
    }
    assert by_text == {"a": "safe", "b": "degraded_forensic", "c": "degraded_forensic"}
    assert await storage.update_summary_flush_receipt_status_by_compaction(KEY, "cmp_x", "s") == 0


# -- repair queue ------------------------------------------------------------------------


async def _degraded(storage: SessionStorage, key: str, status: str, created_at: int) -> None:
    """A summary stored under ``key`` verbatim (save_summary does not canonicalise)."""
    node = SessionNode(session_key=key)
    await storage.save_summary(
        SessionSummary(
            session_id=node.session_id,
            session_key=key,
            summary_text=f"{key} {status}",
            flush_receipt_status=status,
            created_at=created_at,
        )
    )


def _texts(summaries: list[SessionSummary]) -> list[str]:
    return [s.summary_text for s in summaries]


async def test_degraded_summaries_are_the_repairable_statuses(storage: SessionStorage) -> None:
    for i, status in enumerate(
        [
            "degraded_forensic",
            "noop_no_memory",
            "failed_retryable",
            "archive_only",
            "safe",
            "unknown",
            "repaired",
            "not_required",
            "unsafe",
        ]
    ):
        await _degraded(storage, f"agent:main:s{i}", status, created_at=1000 - i)
    found = await storage.list_degraded_summaries()
    # Ordered by created_at: the failed_retryable row (999 - 1) is older.
    assert _texts(found) == [
        "agent:main:s2 failed_retryable",
        "agent:main:s0 degraded_forensic",
    ]


async def test_degraded_summaries_limit(storage: SessionStorage) -> None:
    for i in range(5):
        await _degraded(storage, f"agent:main:s{i}", "failed_retryable", created_at=i)
    assert _texts(await storage.list_degraded_summaries(limit=2)) == [
        "agent:main:s0 failed_retryable",
        "agent:main:s1 failed_retryable",
    ]
    with pytest.raises(InvalidInputError):
        await storage.list_degraded_summaries(limit=-1)


async def test_degraded_agent_filter_is_an_exact_prefix(storage: SessionStorage) -> None:
    """``_`` and ``%`` are ordinary characters here, not LIKE wildcards (§16.11)."""
    keys = [
        "agent:a_b:one",
        "agent:a_b:100%",
        "agent:axb:two",  # matches LIKE 'agent:a_b:%'
        "agent:a_bc:three",
        "agent:a_b",  # no trailing colon: not a key of agent a_b
        "subagent:agent:a_b:x",
        "xagent:a_b:y",
    ]
    for i, key in enumerate(keys):
        await _degraded(storage, key, "degraded_forensic", created_at=i)
    found = await storage.list_degraded_summaries(agent_id="A_B")
    assert _texts(found) == [
        "agent:a_b:one degraded_forensic",
        "agent:a_b:100% degraded_forensic",
    ]


async def test_degraded_agent_filter_with_percent_in_keys(storage: SessionStorage) -> None:
    await _degraded(storage, "agent:main:50%", "failed_retryable", created_at=1)
    await _degraded(storage, "agent:mainframe:x", "failed_retryable", created_at=2)
    # Keys are canonical: this agent segment becomes "m", which must not match "main".
    await _degraded(storage, "agent:m%:x", "failed_retryable", created_at=3)
    found = await storage.list_degraded_summaries(agent_id="default")
    assert _texts(found) == ["agent:main:50% failed_retryable"]
    assert await storage.list_degraded_summaries(agent_id="nobody") == []


async def test_repaired_rows_leave_the_queue(storage: SessionStorage) -> None:
    await _degraded(storage, KEY, "degraded_forensic", created_at=1)
    [queued] = await storage.list_degraded_summaries(agent_id="main")
    assert queued.id is not None
    await storage.update_summary_flush_receipt_status(queued.id, "repaired")
    assert await storage.list_degraded_summaries() == []
    assert await count_rows(storage, "session_summaries") == 1
