"""Transcript search on the storage, by session id (docs/search.md, HEAD-FEATURES §4):
upstream's word, substring and title searches with their shapes, what is and is not
searchable, odd text, hostile queries and ranking, on the backend the environment picks."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import SessionNode

from . import add_entry, add_summary, archived, insert_archive, new_session

KEY = "agent:main:search"
OTHER = "agent:main:other"
UPSTREAM_KEYS = {"id", "session_key", "role", "created_at", "snippet"}


def _ids(hits: list[dict[str, Any]]) -> list[int]:
    return [hit["id"] for hit in hits]


# -- upstream's behaviour (§4.5) ----------------------------------------------------------


async def test_word_search_finds_a_content_word(storage: SessionStorage) -> None:
    """A plain word of a live row is found, with upstream's keys and a marked snippet."""
    node = await new_session(storage, KEY)
    hit = await add_entry(storage, node, "please buy milk on the way home")
    await add_entry(storage, node, "nothing relevant here")

    [found] = await storage.search_transcript("milk")

    assert set(found) >= UPSTREAM_KEYS
    assert found["id"] == hit.id
    assert found["session_key"] == KEY
    assert found["session_id"] == node.session_id
    assert found["role"] == "user"
    assert found["created_at"] == hit.created_at
    assert ">>>milk<<<" in found["snippet"]
    assert found["archived"] is False


async def test_title_search_finds_a_title_word(storage: SessionStorage) -> None:
    await new_session(storage, KEY, display_name="Deploy window planning")
    await new_session(storage, OTHER, display_name="Lunch")

    found = await storage.search_sessions_by_title("deploy")

    assert [node.session_key for node in found] == [KEY]


async def test_cjk_is_not_a_word_but_is_a_substring(storage: SessionStorage) -> None:
    """The word path has no term for CJK and returns []; the substring path finds it."""
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "部署完成后请通知团队检查")

    assert await storage.search_transcript("部署") == []
    [found] = await storage.search_transcript_like("通知团队")
    assert found["id"] == entry.id
    assert ">>>通知团队<<<" in found["snippet"]


async def test_title_search_scans_beyond_two_hundred_sessions(storage: SessionStorage) -> None:
    """Every session is scanned, and matches come newest activity first."""
    await new_session(storage, "agent:main:oldest", display_name="needle one", updated_at=1)
    for index in range(210):
        await new_session(
            storage, f"agent:main:s{index:03d}", display_name="hay", updated_at=1000 + index
        )
    await new_session(storage, "agent:main:newer", subject="needle two", updated_at=5000)

    found = await storage.search_sessions_by_title("needle")

    assert [node.session_key for node in found] == ["agent:main:newer", "agent:main:oldest"]
    assert len(await storage.search_sessions_by_title("hay", limit=500)) == 210


async def test_mixed_ascii_and_cjk_terms_must_all_match(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    both = await add_entry(storage, node, "we deploy tonight; 部署 needs a window")
    await add_entry(storage, node, "缓存 cleared")

    assert _ids(await storage.search_transcript_like("deploy 部署")) == [both.id]
    assert await storage.search_transcript_like("deploy 缓存") == []


async def test_non_ascii_title_search_folds_case(storage: SessionStorage) -> None:
    await new_session(storage, KEY, label="ПРИВЕТ Команда")

    found = await storage.search_sessions_by_title("привет")

    assert [node.session_key for node in found] == [KEY]


async def test_non_ascii_content_search_folds_case(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "Скажи ПРИВЕТ команде, Émile")

    assert _ids(await storage.search_transcript_like("привет")) == [entry.id]
    assert _ids(await storage.search_transcript_like("émile")) == [entry.id]
    [found] = await storage.search_transcript_like("Привет")
    assert ">>>ПРИВЕТ<<<" in found["snippet"]


# -- sanitising -----------------------------------------------------------------------------


async def test_punctuation_splits_words_like_upstream(storage: SessionStorage) -> None:
    """``café-bar, x_y`` searches the words caf, bar, x and y, all of them."""
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "the caf and the bar: x marks y")
    await add_entry(storage, node, "the café-bar only")

    assert _ids(await storage.search_transcript("café-bar, x_y")) == [entry.id]
    assert _ids(await storage.search_transcript("部署 marks")) == [entry.id]


async def test_a_query_without_terms_searches_nothing(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, display_name="anything")
    await add_entry(storage, node, "anything at all")

    for query in ("", "   ", "\t\n"):
        assert await storage.search_transcript(query) == []
        assert await storage.search_transcript_like(query) == []
        assert await storage.search_sessions_by_title(query) == []
    assert await storage.search_transcript("*") == []


async def test_only_the_first_twenty_words_count(storage: SessionStorage) -> None:
    """A 21st word that matches nothing does not empty the word search."""
    words = [f"word{i}" for i in range(20)]
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, " ".join(words))

    assert _ids(await storage.search_transcript(" ".join([*words, "absentword"]))) == [entry.id]
    assert await storage.search_transcript(" ".join([*words[:19], "absentword"])) == []


async def test_only_the_first_ten_substrings_count(storage: SessionStorage) -> None:
    """An 11th term that matches nothing empties neither substring nor title search."""
    terms = [f"p{i}q" for i in range(10)]
    node = await new_session(storage, KEY, display_name=" ".join(terms))
    entry = await add_entry(storage, node, " ".join(terms))

    query = " ".join([*terms, "absentterm"])
    assert _ids(await storage.search_transcript_like(query)) == [entry.id]
    assert [n.session_key for n in await storage.search_sessions_by_title(query)] == [KEY]
    assert await storage.search_transcript_like(" ".join([*terms[:9], "absentterm"])) == []


async def test_like_wildcards_and_backslash_are_literal(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, display_name="50% off")
    await new_session(storage, OTHER, display_name="500 off")
    percent = await add_entry(storage, node, "done 100% now")
    plain = await add_entry(storage, node, "done 1000 now")
    underscore = await add_entry(storage, node, "snake_case")
    await add_entry(storage, node, "snakeXcase")
    backslash = await add_entry(storage, node, "C:\\temp\\x")
    await add_entry(storage, node, "C:temp")

    assert _ids(await storage.search_transcript_like("100%")) == [percent.id]
    assert _ids(await storage.search_transcript_like("%")) == [percent.id]
    assert _ids(await storage.search_transcript_like("e_c")) == [underscore.id]
    assert _ids(await storage.search_transcript_like("_")) == [underscore.id]
    assert _ids(await storage.search_transcript_like(":\\")) == [backslash.id]
    assert _ids(await storage.search_transcript_like("100")) == [plain.id, percent.id]
    assert [n.session_key for n in await storage.search_sessions_by_title("0%")] == [KEY]


# -- what is searchable ---------------------------------------------------------------------


async def test_archived_rows_only_on_request(storage: SessionStorage) -> None:
    """Archived rows are not found by default; with ``include_archived`` they are, marked
    archived, under the id they had when live."""
    node = await new_session(storage, KEY)
    live = await add_entry(storage, node, "live walrus")
    await insert_archive(storage, [archived(node, 4242, "archived walrus 通知")])

    assert _ids(await storage.search_transcript("walrus")) == [live.id]
    assert await storage.search_transcript_like("通知") == []

    both = await storage.search_transcript("walrus", include_archived=True)
    assert sorted((h["id"], h["archived"]) for h in both) == sorted(
        [(live.id, False), (4242, True)]
    )
    [old] = await storage.search_transcript_like("通知", include_archived=True)
    assert (old["id"], old["archived"], old["session_key"]) == (4242, True, KEY)
    assert ">>>通知<<<" in old["snippet"]


async def test_summaries_tool_calls_and_reasoning_are_not_searchable(
    storage: SessionStorage,
) -> None:
    node = await new_session(storage, KEY)
    await add_summary(storage, node, "summary mentions platypus 鸭嘴兽")
    await add_entry(
        storage,
        node,
        None,
        role="assistant",
        tool_calls=[{"id": "c", "function": {"name": "platypus", "arguments": "鸭嘴兽"}}],
        reasoning_content="thinking about platypus 鸭嘴兽",
    )

    assert await storage.search_transcript("platypus") == []
    assert await storage.search_transcript("platypus", include_archived=True) == []
    assert await storage.search_transcript_like("鸭嘴兽", include_archived=True) == []
    assert await storage.search_transcript_like("platypus") == []


async def test_session_filter_restricts(storage: SessionStorage) -> None:
    mine = await new_session(storage, KEY)
    other = await new_session(storage, OTHER)
    kept = await add_entry(storage, mine, "shared word 共享")
    elsewhere = await add_entry(storage, other, "shared word 共享")

    assert sorted(_ids(await storage.search_transcript("shared"))) == [kept.id, elsewhere.id]
    assert _ids(await storage.search_transcript("shared", mine.session_id)) == [kept.id]
    assert _ids(await storage.search_transcript_like("共享", other.session_id)) == [elsewhere.id]
    # Upstream applies the filter only when the id is truthy.
    assert len(await storage.search_transcript("shared", "")) == 2


async def test_a_generation_searched_by_id_without_its_session_row(
    storage: SessionStorage,
) -> None:
    """A search by session id carries the generation's key: that of its session, else the
    key its rows are stored under (orphan rows, their session row gone), so they are still
    found, live and archived, and another generation's rows are not."""
    node = await new_session(storage, KEY)
    other = await new_session(storage, OTHER)
    live = await add_entry(storage, node, "orphaned heron 孤儿")
    await insert_archive(storage, [archived(node, 4343, "archived heron 孤儿")])
    await add_entry(storage, other, "neighbouring heron 孤儿")
    async with storage.engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM sessions WHERE session_key = :k"), {"k": KEY})

    words = await storage.search_transcript("heron", node.session_id, include_archived=True)
    assert sorted((h["id"], h["archived"]) for h in words) == [(live.id, False), (4343, True)]
    like = await storage.search_transcript_like("孤儿", node.session_id, include_archived=True)
    assert sorted(h["id"] for h in like) == [live.id, 4343]
    assert {h["session_key"] for h in words + like} == {KEY}
    assert await storage.search_transcript("heron", "no-such-generation") == []


async def test_deleted_message_is_no_longer_found(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    gone = await add_entry(storage, node, "ephemeral ocelot 豹猫")
    await add_entry(storage, node, "steady")

    assert await storage.delete_transcript_entry(node.session_id, gone.message_id)

    assert await storage.search_transcript("ocelot") == []
    assert await storage.search_transcript_like("豹猫") == []


async def test_upserted_content_replaces_the_searchable_text(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    first = await add_entry(storage, node, "draft mentions aardvark", message_id="msg-1")
    await storage.upsert_transcript_entry_and_touch(
        type(first)(
            session_id=node.session_id,
            session_key=KEY,
            role="user",
            content="final mentions badger",
            message_id="msg-1",
        ),
        expected_epoch=node.epoch,
        updated_at=1_800_000_000_000,
    )

    assert await storage.search_transcript("aardvark") == []
    assert _ids(await storage.search_transcript("badger")) == [first.id]
    assert _ids(await storage.search_transcript_like("badger")) == [first.id]


# -- odd text -------------------------------------------------------------------------------


async def test_words_after_nul_are_found(storage: SessionStorage) -> None:
    """A word after a NUL is found on the word path; the snippet shows the text around it,
    NUL included."""
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "before\x00after zeppelin 飞艇\x00end")

    [word] = await storage.search_transcript("zeppelin")
    assert word["id"] == entry.id
    assert word["snippet"] == "before\x00after >>>zeppelin<<< 飞艇\x00end"
    assert _ids(await storage.search_transcript("after")) == [entry.id]
    assert _ids(await storage.search_transcript("end")) == [entry.id]


async def test_substrings_after_nul_are_found(storage: SessionStorage) -> None:
    """The substring path sees the whole text, not just what precedes the first NUL."""
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "before\x00after zeppelin 飞艇\x00end")

    [sub] = await storage.search_transcript_like("飞艇")
    assert sub["id"] == entry.id
    assert sub["snippet"] == "before\x00after zeppelin >>>飞艇<<<\x00end"
    assert _ids(await storage.search_transcript_like("before\x00after")) == [entry.id]
    assert _ids(await storage.search_transcript_like("before after")) == [entry.id]
    assert await storage.search_transcript_like("before after!") == []


async def test_emoji_rtl_and_combining_text(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    emoji = await add_entry(storage, node, "party 🎉 time")
    rtl = await add_entry(storage, node, "שלום עולם hello")
    combining = await add_entry(storage, node, "cafe\u0301 latte")

    assert _ids(await storage.search_transcript_like("🎉")) == [emoji.id]
    assert _ids(await storage.search_transcript_like("עולם")) == [rtl.id]
    assert _ids(await storage.search_transcript_like("e\u0301")) == [combining.id]
    assert _ids(await storage.search_transcript("latte")) == [combining.id]
    assert _ids(await storage.search_transcript("party time")) == [emoji.id]
    assert _ids(await storage.search_transcript("hello")) == [rtl.id]


async def test_very_long_content(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    entry = await add_entry(storage, node, "filler " * 50_000 + "quetzal 鸟 at the end")

    [word] = await storage.search_transcript("quetzal")
    assert word["id"] == entry.id and ">>>quetzal<<<" in word["snippet"]
    assert len(word["snippet"]) < 2000
    [sub] = await storage.search_transcript_like("鸟")
    assert sub["id"] == entry.id and sub["snippet"].startswith("...")


HOSTILE = [
    '"',
    '"milk',
    "milk AND",
    "AND",
    "OR NOT",
    "NEAR(milk bread, 2)",
    "milk*",
    "*",
    "^milk",
    "content:milk",
    "milk:",
    "(",
    ")",
    "{content}",
    "'; DROP TABLE transcript_entries; --",
    "%",
    "_",
    "\\",
    "\\%",
    "milk\x00",
    "-milk",
    "+",
    "!milk | bread & cheese",
    "<->",
]


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_queries_never_raise(storage: SessionStorage, query: str) -> None:
    """FTS and tsquery syntax, SQL and LIKE wildcards are searched as plain text."""
    node = await new_session(storage, KEY, display_name="milk and bread")
    entry = await add_entry(storage, node, "I need milk and bread")
    await add_entry(storage, node, "milk only")

    words = await storage.search_transcript(query)
    substrings = await storage.search_transcript_like(query)
    titles = await storage.search_sessions_by_title(query)

    for hit in [*words, *substrings]:
        assert hit["session_key"] == KEY
    assert all(node.session_key == KEY for node in titles)
    assert await storage.search_transcript("milk bread") != []  # nothing broke
    assert entry.id in _ids(await storage.search_transcript("milk"))


async def test_hostile_queries_mean_what_they_say(storage: SessionStorage) -> None:
    """Operators are literal words: ``AND`` must occur, ``*`` is no prefix match."""
    node = await new_session(storage, KEY)
    both = await add_entry(storage, node, "I need milk and bread")
    only = await add_entry(storage, node, "milk only")
    await add_entry(storage, node, "milky way")

    assert _ids(await storage.search_transcript('"milk AND')) == [both.id]
    assert sorted(_ids(await storage.search_transcript("milk*"))) == [both.id, only.id]
    assert _ids(await storage.search_transcript("NEAR(milk bread)")) == []  # no word "near"
    assert _ids(await storage.search_transcript("content:only")) == []  # no word "content"
    assert _ids(await storage.search_transcript_like("%")) == []
    assert _ids(await storage.search_transcript_like("milk*")) == []


async def test_ten_thousand_terms_and_a_megabyte_query(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, display_name="milk")
    entry = await add_entry(storage, node, "milk")

    many = " ".join(["milk"] * 10_000)
    assert _ids(await storage.search_transcript(many)) == [entry.id]
    assert _ids(await storage.search_transcript_like(many)) == [entry.id]
    assert len(await storage.search_sessions_by_title(many)) == 1

    distinct = " ".join(f"w{i}" for i in range(10_000))
    assert await storage.search_transcript(distinct) == []
    assert await storage.search_transcript_like(distinct) == []

    spaced = "milk" + " " * (1 << 20)
    assert _ids(await storage.search_transcript(spaced)) == [entry.id]
    assert _ids(await storage.search_transcript_like(spaced)) == [entry.id]


MEGABYTE_WORD = "milk " + "m" * (1 << 20)


async def test_a_megabyte_word_matches_no_word(storage: SessionStorage) -> None:
    """Every term must match: a megabyte-long word (in no row) empties the word search."""
    node = await new_session(storage, KEY)
    await add_entry(storage, node, "milk")

    assert await storage.search_transcript(MEGABYTE_WORD) == []


async def test_a_megabyte_word_matches_no_substring_or_title(storage: SessionStorage) -> None:
    """The substring and title paths take a megabyte-long term without raising."""
    node = await new_session(storage, KEY, display_name="milk")
    await add_entry(storage, node, "milk")

    assert await storage.search_transcript_like(MEGABYTE_WORD) == []
    assert await storage.search_sessions_by_title(MEGABYTE_WORD) == []


@pytest.mark.parametrize(
    "call",
    ["search_transcript", "search_transcript_like", "search_sessions_by_title"],
)
async def test_bad_query_or_limit_is_invalid_input(storage: SessionStorage, call: str) -> None:
    search = getattr(storage, call)
    for query in (None, 5, b"milk", ["milk"]):
        with pytest.raises(InvalidInputError):
            await search(query)
    with pytest.raises(InvalidInputError):
        await search("milk", limit=-1)


async def test_limit_zero_and_limit_cut(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    entries = [await add_entry(storage, node, f"common {i} 共") for i in range(5)]

    assert await storage.search_transcript("common", limit=0) == []
    assert len(await storage.search_transcript("common", limit=3)) == 3
    # The substring path is newest first.
    assert _ids(await storage.search_transcript_like("共", limit=2)) == [
        entries[4].id,
        entries[3].id,
    ]


# -- ranking --------------------------------------------------------------------------------


async def _ranked_corpus(storage: SessionStorage) -> tuple[SessionNode, int, int]:
    node = await new_session(storage, KEY)
    many = await add_entry(storage, node, "kiwi kiwi kiwi apple")
    once = await add_entry(storage, node, "kiwi pear apple plum")
    return node, many.id or 0, once.id or 0


async def test_more_occurrences_rank_higher(storage: SessionStorage) -> None:
    """Rank is higher-is-better: the row with the term three times comes first."""
    _node, many, once = await _ranked_corpus(storage)

    first, second = await storage.search_transcript("kiwi")

    assert (first["id"], second["id"]) == (many, once)
    assert first["rank"] > second["rank"]


async def test_unbounded_window_agrees_on_a_small_corpus(storage: SessionStorage) -> None:
    _node, many, _once = await _ranked_corpus(storage)

    default = await storage.search_transcript("kiwi")
    unbounded = await storage.search_transcript("kiwi", rank_window=None)

    assert default[0]["id"] == unbounded[0]["id"] == many
    assert _ids(default) == _ids(unbounded)


async def test_a_window_of_one_ranks_only_the_newest_match(storage: SessionStorage) -> None:
    """Observed: ``rank_window=1`` keeps only the newest matching row as a candidate, so
    one hit comes back (the newest, though the older row would rank higher)."""
    _node, _many, once = await _ranked_corpus(storage)

    assert _ids(await storage.search_transcript("kiwi", rank_window=1)) == [once]
    with pytest.raises(InvalidInputError):
        await storage.search_transcript("kiwi", rank_window=0)
