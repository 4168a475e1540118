"""What a search query becomes (models/search.py): upstream's sanitising rules for the word
path, the substring terms, LIKE escaping, the path choice and the snippets. Pure functions:
no database."""

from __future__ import annotations

from opensquilla.session.models.search import (
    EMPTY_FTS_QUERY,
    FTS_MAX_TERMS,
    LIKE_MAX_TERMS,
    SearchHit,
    escape_like,
    fts_terms,
    like_terms,
    needs_unicode_folding,
    picks_words,
    sanitize_fts_query,
    substring_snippet,
    word_snippet,
)
from opensquilla.session.storage import SessionStorage


def test_sanitize_keeps_ascii_letters_and_digits_only() -> None:
    """Upstream's example: punctuation and non-ASCII letters split words."""
    assert sanitize_fts_query("café-bar, x_y") == '"caf" "bar" "x" "y"'


def test_sanitize_drops_cjk_terms() -> None:
    assert sanitize_fts_query("部署 deploy") == '"deploy"'


def test_sanitize_without_a_term_is_the_empty_phrase() -> None:
    for raw in ("", "   ", "部署", "*", '"', "^:()"):
        assert sanitize_fts_query(raw) == EMPTY_FTS_QUERY == '""', raw
        assert fts_terms(raw) == [], raw


def test_sanitize_turns_fts_syntax_into_plain_words() -> None:
    """Operators survive only as quoted literals; quotes and stars disappear."""
    assert sanitize_fts_query('milk AND "bread" NEAR(x, 2) col:y z* ^w') == (
        '"milk" "AND" "bread" "NEAR" "x" "2" "col" "y" "z" "w"'
    )


def test_only_the_first_twenty_word_terms_are_kept() -> None:
    terms = [f"t{i}" for i in range(25)]
    assert FTS_MAX_TERMS == 20
    assert fts_terms(" ".join(terms)) == terms[:20]
    assert sanitize_fts_query(" ".join(terms)).count('"') == 40


def test_only_the_first_ten_substring_terms_are_kept_lowercased() -> None:
    terms = [f"T{i}" for i in range(12)]
    assert LIKE_MAX_TERMS == 10
    assert like_terms(" ".join(terms)) == [t.lower() for t in terms[:10]]
    assert like_terms("ПРИВЕТ  通知团队") == ["привет", "通知团队"]
    assert like_terms("   ") == []


def test_escape_like_makes_wildcards_and_backslash_literal() -> None:
    assert escape_like("100%") == "%100\\%%"
    assert escape_like("a_b") == "%a\\_b%"
    assert escape_like("c:\\dir") == "%c:\\\\dir%"
    assert escape_like("plain") == "%plain%"


def test_folding_is_needed_only_for_cased_non_ascii() -> None:
    assert needs_unicode_folding("привет")
    assert needs_unicode_folding("Émile")
    assert not needs_unicode_folding("deploy")
    assert not needs_unicode_folding("通知团队")  # CJK has no case
    assert not needs_unicode_folding("🙂 123")


def test_path_choice() -> None:
    """ASCII with a word -> words; any non-ASCII, or no word at all -> substring."""
    assert picks_words("deploy window")
    assert not picks_words("deploy 部署")
    assert not picks_words("部署")
    assert not picks_words("%_")
    assert not picks_words("")


def test_substring_snippet_marks_the_first_term_with_context() -> None:
    text = "a" * 50 + "通知团队" + "b" * 50
    snippet = substring_snippet(text, "通知团队")
    assert snippet == "..." + "a" * 40 + ">>>通知团队<<<" + "b" * 40 + "..."
    assert substring_snippet("Hello World", "world") == "Hello >>>World<<<"
    assert substring_snippet("x" * 100, "absent") == "x" * 80
    assert substring_snippet(None, "x") == ""


def test_word_snippet_marks_a_whole_word() -> None:
    assert word_snippet("buy Milk today", ["milk"]) == "buy >>>Milk<<< today"
    assert word_snippet("milkshake only", ["milk"]) == "milkshake only"


def test_storage_exposes_sanitize_as_a_static_method() -> None:
    assert SessionStorage.sanitize_fts_query("café-bar, x_y") == '"caf" "bar" "x" "y"'


def test_hit_dict_has_upstream_keys_first() -> None:
    hit = SearchHit(
        id=1,
        session_key="agent:main:a",
        session_id="s",
        message_id="m",
        role="user",
        created_at=5,
        snippet=">>>x<<<",
    )
    assert list(hit.as_dict())[:5] == ["id", "session_key", "role", "created_at", "snippet"]
    assert hit.as_dict()["archived"] is False and hit.as_dict()["rank"] is None
