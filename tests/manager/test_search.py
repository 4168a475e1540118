"""Search through the manager, by session key (docs/search.md): the one ``search()`` call
(title hits, then one message hit per other session, the path picked by the query), the
key filter, and what compaction, reset, removal and upserts do to what is found."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionManager
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError

KEY = "agent:main:search"
OTHER = "agent:main:other"
THIRD = "agent:main:third"
BIG = "x" * 500


async def test_search_finds_content_and_titles(manager: SessionManager) -> None:
    """``milk`` is found in a message, ``deploy`` in a title; ASCII takes the word path."""
    await manager.create(KEY, display_name="Deploy checklist")
    await manager.create(OTHER)
    entry = await manager.append_message(OTHER, "user", "remember to buy milk")

    milk = await manager.search("milk")
    assert milk.path == "words" and milk.sessions == []
    assert [(h.id, h.session_key) for h in milk.messages] == [(entry.id, OTHER)]
    assert ">>>milk<<<" in milk.messages[0].snippet

    deploy = await manager.search("deploy")
    assert [n.session_key for n in deploy.sessions] == [KEY] and deploy.messages == []


async def test_cjk_search_takes_the_substring_path(manager: SessionManager) -> None:
    await manager.create(KEY)
    entry = await manager.append_message(KEY, "assistant", "部署完成，请通知团队")

    assert await manager.search_transcript("部署") == []
    found = await manager.search("通知团队")
    assert found.path == "substring"
    assert [h.id for h in found.messages] == [entry.id]
    assert ">>>通知团队<<<" in found.messages[0].snippet


async def test_message_hits_are_one_per_session_and_skip_title_hits(
    manager: SessionManager,
) -> None:
    await manager.create(KEY, display_name="kettle notes")
    await manager.create(OTHER)
    await manager.create(THIRD)
    await manager.append_message(KEY, "user", "kettle in the title session")
    for text in ("kettle one", "kettle two", "kettle three"):
        await manager.append_message(OTHER, "user", text)
    await manager.append_message(THIRD, "user", "kettle again")

    found = await manager.search("kettle")

    assert [n.session_key for n in found.sessions] == [KEY]
    assert sorted(h.session_key for h in found.messages) == [OTHER, THIRD]
    # The transcript search itself is not deduplicated.
    assert len(await manager.search_transcript("kettle")) == 5


async def test_mixed_ascii_and_cjk_query(manager: SessionManager) -> None:
    await manager.create(KEY)
    both = await manager.append_message(KEY, "user", "deploy at nine, 部署 after checks")
    await manager.append_message(KEY, "user", "缓存 only")

    found = await manager.search("deploy 部署")
    assert found.path == "substring" and [h.id for h in found.messages] == [both.id]
    assert (await manager.search("deploy 缓存")).messages == []


async def test_non_ascii_case_folding(manager: SessionManager) -> None:
    await manager.create(KEY, subject="ПРИВЕТ Команда")
    await manager.create(OTHER)
    entry = await manager.append_message(OTHER, "user", "Большой ПРИВЕТ всем")

    assert [n.session_key for n in await manager.search_sessions_by_title("привет")] == [KEY]
    assert [h.id for h in await manager.search_transcript_like("привет")] == [entry.id]
    found = await manager.search("привет")
    assert [n.session_key for n in found.sessions] == [KEY]
    assert [h.session_key for h in found.messages] == [OTHER]


async def test_session_key_filter(manager: SessionManager) -> None:
    """A key narrows every search to its session (no title hits); a missing key is an
    error; any spelling of the key works."""
    await manager.create(KEY, display_name="heron")
    await manager.create(OTHER)
    mine = await manager.append_message(KEY, "user", "heron 鹭")
    await manager.append_message(OTHER, "user", "heron 鹭")

    found = await manager.search("heron", session_key="agent:MAIN:search")
    assert found.sessions == [] and [h.id for h in found.messages] == [mine.id]
    assert [h.id for h in await manager.search_transcript("heron", session_key=KEY)] == [mine.id]
    like = await manager.search_transcript_like("鹭", session_key=KEY)
    assert [h.id for h in like] == [mine.id]
    with pytest.raises(SessionNotFoundError):
        await manager.search("heron", session_key="agent:main:nobody")


async def test_compacted_rows_only_with_include_archived(manager: SessionManager) -> None:
    """Rows moved to the archive by a real compaction are found only on request, marked
    archived, under the id they had when live."""
    await manager.create(KEY)
    for index in range(20):
        await manager.append_message(KEY, "user", f"msg {index} {BIG}", token_count=200)
    first = (await manager.get_transcript(KEY))[0]
    assert first.content is not None and first.content.startswith("msg 0 ")
    assert await manager.compact(KEY, context_window_tokens=1000)
    live_ids = {e.id for e in await manager.get_transcript(KEY)}
    assert first.id not in live_ids

    default = await manager.search_transcript("msg", limit=100)
    assert {h.id for h in default} == live_ids and not any(h.archived for h in default)

    every = await manager.search_transcript("msg", include_archived=True, limit=100)
    by_id = {h.id: h for h in every}
    assert by_id[first.id or 0].archived and by_id[first.id or 0].message_id == first.message_id
    assert len(every) == 20
    like = await manager.search_transcript_like("msg", include_archived=True, limit=100)
    assert {h.id for h in like if h.archived} == {first.id} | (set(by_id) - live_ids)
    assert {h.id for h in like if not h.archived} == live_ids
    assert (await manager.search("msg", include_archived=True)).messages[0].session_key == KEY


async def test_reset_hides_the_old_generation(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before reset: lynx 猞猁")

    await manager.reset(KEY)
    after = await manager.append_message(KEY, "user", "after reset: lynx")

    assert [h.id for h in await manager.search_transcript("lynx", include_archived=True)] == [
        after.id
    ]
    assert await manager.search_transcript_like("猞猁", include_archived=True) == []
    assert await manager.search_transcript("before") == []


async def test_removed_message_is_not_found(manager: SessionManager) -> None:
    await manager.create(KEY)
    gone = await manager.append_message(KEY, "user", "tapir sighting 貘")

    assert await manager.remove_message(KEY, gone.message_id)

    assert await manager.search_transcript("tapir") == []
    assert await manager.search_transcript_like("貘") == []
    assert (await manager.search("tapir")).messages == []


async def test_deleted_session_is_not_found(manager: SessionManager) -> None:
    await manager.create(KEY, display_name="gecko")
    await manager.append_message(KEY, "user", "gecko 壁虎")

    assert await manager.delete(KEY)

    found = await manager.search("gecko")
    assert found.sessions == [] and found.messages == []
    assert await manager.search_transcript_like("壁虎") == []


async def test_upsert_by_message_id_replaces_the_searchable_text(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    first = await manager.append_message(KEY, "assistant", "draft: wombat 草稿", message_id="a-1")
    again = await manager.append_message(KEY, "assistant", "final: quokka 定稿", message_id="a-1")
    assert again.id == first.id

    assert await manager.search_transcript("wombat") == []
    assert await manager.search_transcript_like("草稿") == []
    assert [h.id for h in await manager.search_transcript("quokka")] == [first.id]
    assert [h.id for h in await manager.search_transcript_like("定稿")] == [first.id]


async def test_bad_arguments_are_invalid_input(manager: SessionManager) -> None:
    await manager.create(KEY)
    for call in (manager.search, manager.search_transcript, manager.search_transcript_like):
        with pytest.raises(InvalidInputError):
            await call(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            await call("x", limit=-1)
    with pytest.raises(InvalidInputError):
        await manager.search("x", include_archived="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await manager.search_sessions_by_title(b"x")  # type: ignore[arg-type]


async def test_limit_applies_to_sessions_and_messages(manager: SessionManager) -> None:
    for index in range(4):
        key = f"agent:main:s{index}"
        await manager.create(key)
        await manager.append_message(key, "user", "egret")

    found = await manager.search("egret", limit=2)

    assert len(found.messages) == 2
    assert len({h.session_key for h in found.messages}) == 2
    assert (await manager.search("egret", limit=0)).messages == []
