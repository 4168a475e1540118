"""``get_context_view``: the latest summary and the newest live messages that fit a budget,
on a turn boundary, from one snapshot (both backends)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionManager, SessionNotFoundError, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.tokens import entry_tokens, estimate_tokens
from opensquilla.session.db.repos.summaries import SummaryRepository
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.usecases.context.view import FIRST_BATCH, MAX_BATCH, next_batch

KEY = "agent:main:view"
CALL = [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]


async def turn(manager: SessionManager, label: str, tokens: int = 10) -> None:
    await manager.append_message(KEY, "user", f"q {label}", token_count=tokens)
    await manager.append_message(KEY, "assistant", f"a {label}", token_count=tokens)


async def test_missing_session_is_a_key_error(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError, match="Session not found: agent:main:view"):
        await manager.get_context_view(KEY, max_tokens=100)


@pytest.mark.parametrize("bad", [-1, 1.5, "10", None, True])
async def test_max_tokens_must_be_a_non_negative_integer(manager: SessionManager, bad: Any) -> None:
    await manager.create(KEY)
    with pytest.raises(InvalidInputError, match="max_tokens"):
        await manager.get_context_view(KEY, max_tokens=bad)


async def test_everything_fits(manager: SessionManager) -> None:
    await manager.create(KEY)
    await turn(manager, "1")
    await turn(manager, "2")

    view = await manager.get_context_view(KEY, max_tokens=1_000)

    live = await manager.get_transcript(KEY)
    assert [e.id for e in view.messages] == [e.id for e in live]
    assert view.summary is None and view.summary_tokens == 0
    assert view.message_tokens == 40 and view.total_tokens == 40
    assert view.budget_tokens == 1_000 and view.truncated is False
    node = await manager.get_session(KEY)
    assert node is not None
    assert (view.session_id, view.epoch, view.session_key) == (node.session_id, node.epoch, KEY)


async def test_cut_starts_at_the_newest_user_message_that_fits(manager: SessionManager) -> None:
    await manager.create(KEY)
    for label in "123":
        await turn(manager, label)

    # 35 tokens fit "a 2", "q 3", "a 3"; a view must not start on the answer of turn 2.
    view = await manager.get_context_view(KEY, max_tokens=35)

    assert [e.content for e in view.messages] == ["q 3", "a 3"]
    assert view.message_tokens == 20 and view.truncated is True


async def test_empty_budget_gives_an_empty_view(manager: SessionManager) -> None:
    await manager.create(KEY)
    await turn(manager, "1")

    view = await manager.get_context_view(KEY, max_tokens=0)

    assert view.messages == [] and view.message_tokens == 0 and view.truncated is True


async def test_empty_session(manager: SessionManager) -> None:
    await manager.create(KEY)
    view = await manager.get_context_view(KEY, max_tokens=0)
    assert view.messages == [] and view.truncated is False


async def test_a_tool_result_never_loses_its_call(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "list files", token_count=10)
    await manager.append_message(KEY, "assistant", None, tool_calls=CALL, token_count=10)
    await manager.append_message(KEY, "tool", "a.txt", tool_call_id="call_1", token_count=10)
    await manager.append_message(KEY, "assistant", "two files", token_count=10)
    call_size = entry_tokens((await manager.get_transcript(KEY))[1].__dict__)
    result_size = entry_tokens((await manager.get_transcript(KEY))[2].__dict__)

    # Room for the result and the answer, not for the call: the result is left out too.
    view = await manager.get_context_view(KEY, max_tokens=result_size + 10 + call_size - 1)
    assert [e.content for e in view.messages] == ["two files"]

    # Room for the call as well: the whole exchange, still no user message.
    view = await manager.get_context_view(KEY, max_tokens=result_size + 10 + call_size)
    assert [e.role for e in view.messages] == ["assistant", "tool", "assistant"]
    assert view.message_tokens == call_size + result_size + 10


async def test_summary_counts_against_the_budget(manager: SessionManager) -> None:
    await manager.create(KEY)
    for index in range(8):
        await manager.append_message(KEY, "user", f"old {index} " + "x" * 400, token_count=200)
    result = await manager.compact_with_result(KEY, 1_000, CompactionConfig())
    assert result.removed_count > 0
    await turn(manager, "new")
    summary = await manager.get_latest_summary(KEY)
    assert summary is not None
    summary_tokens = estimate_tokens(summary.summary_text)

    view = await manager.get_context_view(KEY, max_tokens=summary_tokens + 20)

    assert view.summary is not None and view.summary.id == summary.id
    assert view.summary.summary_payload == summary.summary_payload
    assert view.summary_tokens == summary_tokens and view.budget_tokens == 20
    assert [e.content for e in view.messages] == ["q new", "a new"]
    assert view.total_tokens == summary_tokens + 20
    # Only live rows: what the compaction archived is behind the summary.
    archived = {e.id for e in await manager.get_canonical_transcript(KEY)} - {
        e.id for e in await manager.get_transcript(KEY)
    }
    assert archived and not archived & {e.id for e in view.messages}


async def test_the_read_walks_back_over_several_batches(manager: SessionManager) -> None:
    """More rows than the first batches hold: the view is still the exact fitting suffix."""
    await manager.create(KEY)
    for index in range(200):
        await turn(manager, str(index), tokens=1)

    view = await manager.get_context_view(KEY, max_tokens=399)
    live = await manager.get_transcript(KEY)
    # 399 tokens fit 399 rows; the oldest of them is an answer, so the view starts one later.
    assert [e.id for e in view.messages] == [e.id for e in live[2:]]
    assert view.truncated is True

    whole = await manager.get_context_view(KEY, max_tokens=400)
    assert [e.id for e in whole.messages] == [e.id for e in live]
    assert whole.truncated is False


async def test_batches_are_sized_by_the_messages_already_read(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first batch the read asks for about what the rest of the budget holds, not
    four times the last batch: a view of ~150 messages reads ~1.25x that many rows."""
    await manager.create(KEY)
    for index in range(300):
        await turn(manager, f"{index:03d} " + "x" * 40)
    reads: list[tuple[int, int]] = []
    live_tail = TranscriptRepository.live_tail

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        rows = await live_tail(self, *args, **kwargs)
        reads.append((args[1], len(rows)))
        return rows

    monkeypatch.setattr(TranscriptRepository, "live_tail", counted)
    per_message = entry_tokens((await manager.get_transcript(KEY))[-1].__dict__)
    view = await manager.get_context_view(KEY, max_tokens=150 * per_message)
    assert len(view.messages) >= 140 and view.truncated
    assert reads[0][0] == FIRST_BATCH and len(reads) == 2
    assert sum(read for _, read in reads) <= 1.3 * len(view.messages) + 2


@pytest.mark.parametrize(
    ("batch", "rows", "used", "budget", "expected"),
    [
        (64, 64, 3_200, 8_000, 121),  # 4,800 tokens left at 50 a row: 96, a quarter more
        (64, 64, 7_990, 8_000, FIRST_BATCH),  # never below the first batch
        (64, 64, 64, 10**9, MAX_BATCH),  # never above the largest
        (64, 64, 0, 8_000, 256),  # empty messages cost nothing: grow as before
        (2_048, 64, 0, 8_000, MAX_BATCH),
    ],
)
def test_next_batch(batch: int, rows: int, used: int, budget: int, expected: int) -> None:
    assert next_batch(batch, rows, used, budget) == expected


async def test_one_snapshot_across_a_concurrent_compaction(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction that commits after the view read the summary (and before it reads the
    messages) is invisible to it: no summary and no message counted twice or lost."""
    await manager.create(KEY)
    for index in range(8):
        await manager.append_message(KEY, "user", f"m {index} " + "x" * 400, token_count=200)
    before = await manager.get_transcript(KEY)
    latest = SummaryRepository.latest
    fired: list[int] = []

    async def latest_then_compact(self: SummaryRepository, session_id: str, **kw: Any) -> Any:
        found = await latest(self, session_id, **kw)
        if not fired:
            fired.append(1)
            other = SessionManager(storage, inject_time_prefix=False)
            result = await other.compact_with_result(KEY, 1_000, CompactionConfig())
            assert result.removed_count > 0  # it did commit in between
        return found

    monkeypatch.setattr(SummaryRepository, "latest", latest_then_compact)
    view = await manager.get_context_view(KEY, max_tokens=100_000)

    assert fired and view.summary is None
    assert [e.id for e in view.messages] == [e.id for e in before]
    monkeypatch.undo()
    after = await manager.get_context_view(KEY, max_tokens=100_000)
    assert after.summary is not None and len(after.messages) < len(before)


ROLES = st.sampled_from(["user", "assistant", "call", "tool"])
KEYS = itertools.count()


# Each example writes a session of its own key, so the shared storage fixture is safe.
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.tuples(ROLES, st.integers(1, 30)), max_size=40),
    max_tokens=st.integers(0, 400),
)
async def test_view_is_the_longest_fitting_suffix_on_a_turn_boundary(
    storage: SessionStorage, shape: list[tuple[str, int]], max_tokens: int
) -> None:
    key = f"agent:main:prop-{next(KEYS)}"
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(key)
    for role, tokens in shape:
        if role == "call":
            await manager.append_message(
                key, "assistant", None, tool_calls=CALL, token_count=tokens
            )
        elif role == "tool":
            await manager.append_message(key, "tool", "r", tool_call_id="c", token_count=tokens)
        else:
            await manager.append_message(key, role, "t", token_count=tokens)
    live = await manager.get_transcript(key)
    sizes = [entry_tokens(e.__dict__) for e in live]

    view = await manager.get_context_view(key, max_tokens=max_tokens)

    count = len(view.messages)
    assert [e.id for e in view.messages] == [e.id for e in live[len(live) - count :]]
    assert view.message_tokens == sum(sizes[len(live) - count :]) <= max_tokens
    fits = 0
    while fits < len(live) and sum(sizes[len(live) - fits - 1 :]) <= max_tokens:
        fits += 1
    assert view.truncated is (fits < len(live))
    if not view.truncated:
        assert count == len(live)
    else:
        window = live[len(live) - fits :]
        users = [i for i, e in enumerate(window) if e.role == "user"]
        if users:
            assert count == fits - users[0]
        if count:
            assert view.messages[0].role != "tool"
