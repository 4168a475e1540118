"""Every bad input is the package's own error, before any write (issue 11, item 13).

The reproductions of the issue, and the same classes of input everywhere they apply: an
integer beyond 64 bits, a value of the wrong type, NaN, a setting or option out of its
domain. Each is refused with an ``InvalidInputError`` (or ``ConfigurationError`` for a
setting) whose message names the parameter, and no row of any table changes, on both
backends alike. ``refused`` and ``wide_text`` are shared with the other modules here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.db.errors import translate
from opensquilla.session.errors import (
    ConfigurationError,
    InvalidInputError,
    SessionStoreError,
)
from opensquilla.session.models import (
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from opensquilla.session.usecases import retention
from tests.helpers import table_snapshot

KEY = "agent:main:bad-input"
BEYOND_64_BITS = 2**63

# CJK Extension B: 42,720 code points, each 4 bytes of UTF-8. Random text over it is the
# worst case for a PostgreSQL index entry (largest in bytes, and incompressible).
_WIDE_FIRST, _WIDE_LAST = 0x20000, 0x2A6DF


def wide_text(length: int, seed: int) -> str:
    """``length`` random 4-byte characters (reproducible: the same seed, the same text)."""
    rng = random.Random(seed)
    return "".join(chr(rng.randint(_WIDE_FIRST, _WIDE_LAST)) for _ in range(length))


async def refused(
    storage: SessionStorage,
    call: Callable[[], Awaitable[Any]],
    error: type[BaseException] = InvalidInputError,
    *,
    names: str | None = None,
) -> BaseException:
    """``call`` raises ``error``, a package error that is no pydantic ``ValidationError``,
    whose message names ``names`` (when given), and no row of any table changes."""
    before = await table_snapshot(storage)
    with pytest.raises(error) as caught:
        await call()
    assert isinstance(caught.value, SessionStoreError), repr(caught.value)
    assert not isinstance(caught.value, ValidationError), repr(caught.value)
    if names is not None:
        assert names in str(caught.value), str(caught.value)
    assert await table_snapshot(storage) == before
    return caught.value


async def _session_with_history(manager: SessionManager) -> SessionNode:
    node = await manager.create(KEY)
    for n in range(8):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(KEY, role, f"message {n} " * 30, token_count=500)
    return node


# -- the reproductions -------------------------------------------------------------------


async def test_integers_beyond_64_bits_are_invalid_input_naming_the_parameter(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """SQLite raised a bare ``OverflowError``, Postgres a generic ``DatabaseError``."""
    node = await _session_with_history(manager)
    big = BEYOND_64_BITS
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "token_count": lambda: manager.append_message(KEY, "user", "x", token_count=big),
        "context_tokens": lambda: manager.update(KEY, context_tokens=big),
        "input_tokens": lambda: manager.create("agent:main:new", input_tokens=big),
        "limit": lambda: manager.get_transcript(KEY, limit=big),
        "offset": lambda: manager.get_canonical_transcript(KEY, offset=big),
        "max_age_ms": lambda: manager.prune_stale(big),
        "max_entries": lambda: manager.cap_entries(big),
        "max_messages": lambda: manager.truncate(KEY, big),
        "expires_at": lambda: manager.save_context_state(
            SessionContextState(
                session_id=node.session_id, session_key=KEY, state_kind="s", expires_at=big
            )
        ),
        "created_at": lambda: storage.append_transcript_entry(
            TranscriptEntry(session_id=node.session_id, session_key=KEY, role="u", created_at=big)
        ),
        "tokens_before": lambda: storage.save_summary(
            SessionSummary(
                session_id=node.session_id, session_key=KEY, summary_text="s", tokens_before=big
            )
        ),
        "summary_id": lambda: storage.update_summary_flush_receipt_status(big, "safe"),
    }
    for name, call in calls.items():
        await refused(storage, call, names=name)
    for name, call in {
        "limit": lambda: storage.list_sessions(limit=big),
        "offset": lambda: storage.get_transcript(node.session_id, offset=-big),
        "max_fork_tokens": lambda: manager.branch(
            KEY, "agent:main:child", fork_transcript=True, max_fork_tokens=big
        ),
    }.items():
        await refused(storage, call, names=name)


async def test_provenance_that_is_not_a_mapping_of_known_keys_is_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``provenance="web"`` raised ``ValueError`` from ``dict()``; an unknown key was
    silently dropped."""
    await manager.create(KEY)
    await refused(
        storage,
        lambda: manager.append_message(KEY, "user", "x", provenance="web"),  # type: ignore[arg-type]
        names="provenance",
    )
    await refused(
        storage,
        lambda: manager.append_message(KEY, "user", "x", provenance={"source_tol": "typo"}),
        names="source_tol",
    )
    await refused(
        storage,
        lambda: manager.append_message(KEY, "user", "x", provenance={"kind": 5}),
        names="provenance_kind",
    )
    entry = await manager.append_message(
        KEY, "user", "x", provenance={"kind": "external_user", "source_session_key": "agent:A:b"}
    )
    assert (entry.provenance_kind, entry.provenance_source_session_key) == (
        "external_user",
        "agent:a:b",  # a key-like field: canonical, like every key
    )


async def test_branch_refuses_a_token_budget_that_is_not_an_integer(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``max_fork_tokens="10"`` raised a ``TypeError`` from a comparison."""
    await _session_with_history(manager)
    for budget in ("10", 1.5, True, -1):
        await refused(
            storage,
            lambda budget=budget: manager.branch(
                KEY, "agent:main:child", fork_transcript=True, max_fork_tokens=budget
            ),
            names="max_fork_tokens",
        )
    for flag in ("no", 1, None):
        await refused(
            storage,
            lambda flag=flag: manager.branch(KEY, "agent:main:child", fork_transcript=flag),
            names="fork_transcript",
        )
    await refused(
        storage,
        lambda: manager.branch(
            KEY, "agent:main:child", fork_transcript=True, fork_before_message_id="m\x00"
        ),
        names="fork_before_message_id",
    )


async def test_compaction_refuses_options_of_the_wrong_type_before_reading(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``compact(custom_instructions=5)`` raised ``AttributeError``; an over-long
    instruction a plain ``ValueError``; a NUL in ``compaction_id`` was stored on SQLite
    and refused by Postgres (the archive keeps it as plain text)."""
    await _session_with_history(manager)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "custom_instructions": lambda: manager.compact(KEY, 100, custom_instructions=5),  # type: ignore[arg-type]
        "too long": lambda: manager.compact(KEY, 100, custom_instructions="x" * 2001),
        "compaction_id": lambda: manager.compact_with_result(KEY, 100, compaction_id="c\x00"),
        "trigger_reason": lambda: manager.compact_with_result(KEY, 100, trigger_reason=7),  # type: ignore[arg-type]
        "flush_receipt_status": lambda: manager.compact_with_result(
            KEY,
            100,
            flush_receipt_status=["x"],  # type: ignore[arg-type]
        ),
        "config": lambda: manager.compact(KEY, 100, config={"safety_margin": 1}),  # type: ignore[arg-type]
        "summarizer": lambda: manager.compact_with_result(KEY, 100, summarizer="llm"),  # type: ignore[arg-type]
        "mutation_context": lambda: manager.compact_with_result(
            KEY,
            100,
            mutation_context=5,  # type: ignore[arg-type]
        ),
    }
    for name, call in calls.items():
        await refused(storage, call, names=name)
    await refused(
        storage,
        lambda: manager.compact_with_result(KEY, 100, compaction_id="c" * 257),
        names="limit is 256",
    )


async def test_persist_compaction_result_raises_no_pydantic_error(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Bad kept entries raised raw pydantic ``ValidationError``s."""
    await _session_with_history(manager)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "kept_entries[0].role": lambda: manager.persist_compaction_result(
            KEY, "summary", [{"role": 5, "content": "x"}]
        ),
        "kept_entries[1].content": lambda: manager.persist_compaction_result(
            KEY, "summary", [{"role": "user"}, {"role": "user", "content": b"bytes"}]
        ),
        "kept_entries[0] must be a dict": lambda: manager.persist_compaction_result(
            KEY,
            "summary",
            ["user: hi"],  # type: ignore[list-item]
        ),
        "kept_entries must be a list": lambda: manager.persist_compaction_result(
            KEY,
            "summary",
            "abc",  # type: ignore[arg-type]
        ),
        "tool_calls": lambda: manager.persist_compaction_result(
            KEY, "summary", [{"role": "assistant", "content": "new", "tool_calls": "call"}]
        ),
        "summary": lambda: manager.persist_compaction_result(KEY, 42, [{"role": "user"}]),  # type: ignore[arg-type]
        "compaction_id": lambda: manager.persist_compaction_result(
            KEY, "summary", [{"role": "user"}], compaction_id="c" * 300
        ),
    }
    for name, call in calls.items():
        await refused(storage, call, names=name)


async def test_nan_and_infinite_costs_are_invalid_input_on_both_backends(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """SQLite reported NaN as "NOT NULL constraint failed"; Postgres stored it."""
    node = await manager.create(KEY)
    for bad in (math.nan, math.inf, -math.inf, 10**400):
        for field in (
            "estimated_cost_usd",
            "total_cost_usd",
            "billed_cost_usd",
            "estimated_cost_component_usd",
        ):
            await refused(
                storage, lambda f=field, b=bad: manager.update(KEY, **{f: b}), names=field
            )
            await refused(
                storage,
                lambda f=field, b=bad: manager.create("agent:main:new", **{f: b}),
                names=field,
            )
            await refused(
                storage,
                lambda f=field, b=bad: storage.upsert_session(node.model_copy(update={f: b})),
                names=field,
            )


async def test_values_of_the_wrong_type_are_refused_not_coerced(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A bool is not a count, "10" is not an integer, bytes are not text, 1 is not True:
    SQLite would store each as given, Postgres refuse or convert it."""
    await manager.create(KEY)
    cases: dict[str, Any] = {
        "spawn_depth": True,
        "input_tokens": "10",
        "context_tokens": 1.0,
        "label": b"label",
        "fast_mode": 1,
        "forked_from_parent": "yes",
        "model": 5,
        "delivery_context": ["not", "a", "dict"],
        "origin": {1: "int key"},
    }
    for field, value in cases.items():
        await refused(storage, lambda f=field, v=value: manager.update(KEY, **{f: v}), names=field)
    await refused(storage, lambda: manager.append_message(KEY, 5, "x"), names="role")  # type: ignore[arg-type]
    await refused(storage, lambda: manager.append_message(KEY, "user", 5), names="content")  # type: ignore[arg-type]
    await refused(
        storage, lambda: manager.append_message(KEY, "user", "x", token_count=True), names="token"
    )
    await refused(
        storage,
        lambda: manager.save_context_state({"session_key": KEY}),  # type: ignore[arg-type]
        names="SessionContextState",
    )
    await refused(
        storage,
        lambda: storage.upsert_session({"session_key": KEY}),  # type: ignore[arg-type]
        names="SessionNode",
    )
    await refused(
        storage,
        lambda: storage.update_session_fields(KEY, {"no_such_column": 1}),
        names="no_such_column",
    )
    await refused(
        storage, lambda: storage.finish_session(KEY, "finished", 1), names="SessionStatus"
    )
    await refused(
        storage,
        lambda: storage.invalidate_context_states(KEY, reason=5),  # type: ignore[arg-type]
        names="reason",
    )


async def test_a_refused_record_assignment_leaves_the_record_as_it_was() -> None:
    """Records validate assignments and ``model_copy(update=...)`` too, so a value outside
    the domain cannot be slipped in after construction."""
    node = SessionNode(session_key=KEY)
    with pytest.raises(InvalidInputError, match="spawn_depth"):
        node.spawn_depth = 2**31
    assert node.spawn_depth == 0
    with pytest.raises(InvalidInputError, match="total_cost_usd"):
        node.model_copy(update={"total_cost_usd": math.nan})
    with pytest.raises(InvalidInputError, match="no_such_field"):
        node.model_copy(update={"no_such_field": 1})


async def test_retention_batches_of_zero_end_instead_of_looping_forever(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``batch_size=0`` made ``prune_stale`` and ``cap_sessions`` loop forever; below the
    front door (which always passes its own batch size) a batch that finds nothing to
    delete ends the run."""
    await manager.create(KEY)
    before = await table_snapshot(storage)
    assert await retention.prune_stale(storage.uow, 2**62, batch_size=0) == 0
    assert await retention.cap_sessions(storage.uow, 0, batch_size=0) == 0
    assert await table_snapshot(storage) == before


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"sqlite_synchronous": "SOMETIMES"}, "sqlite_synchronous"),
        ({"sqlite_synchronous": "FULL; DROP TABLE sessions"}, "sqlite_synchronous"),
        ({"sqlite_synchronous": 2}, "sqlite_synchronous"),
        ({"pool_size": 0}, "pool_size"),
        ({"pool_size": -3}, "pool_size"),
        ({"pool_size": True}, "pool_size"),
        ({"pool_size": "5"}, "pool_size"),
        ({"echo": "yes"}, "echo"),
    ],
)
def test_storage_settings_are_refused_before_anything_is_opened(
    tmp_path: Path, options: dict[str, Any], name: str
) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(ConfigurationError, match=name):
        SessionStorage(path, **options)
    with pytest.raises(ConfigurationError, match=name):
        SessionStorage("postgresql://app:S3CRET@127.0.0.1:1/none", **options)
    assert not path.exists()


async def test_storage_settings_in_their_domain_are_accepted(tmp_path: Path) -> None:
    async with SessionStorage(
        tmp_path / "fine.db", sqlite_synchronous="normal", pool_size=2, echo=False
    ) as storage:
        async with storage.engine.connect() as conn:
            level = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar_one()
        assert level == 1  # NORMAL


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"safety_margin": math.nan}, "safety_margin"),
        ({"safety_margin": 0}, "safety_margin"),
        ({"base_chunk_ratio": 0.0}, "base_chunk_ratio"),
        ({"base_chunk_ratio": 1.5}, "base_chunk_ratio"),
        ({"min_chunk_ratio": -0.1}, "min_chunk_ratio"),
        ({"min_chunk_ratio": "0.1"}, "min_chunk_ratio"),
        ({"default_parts": 0}, "default_parts"),
        ({"default_parts": 2.0}, "default_parts"),
        ({"identifier_policy": "Strict"}, "identifier_policy"),
        ({"identifier_policy": None}, "identifier_policy"),
        ({"timeout_seconds": math.inf}, "timeout_seconds"),
        ({"timeout_seconds": -1}, "timeout_seconds"),
        ({"total_timeout_seconds": 0}, "total_timeout_seconds"),
        ({"total_timeout_seconds": math.nan}, "total_timeout_seconds"),
        ({"total_timeout_seconds": "120"}, "total_timeout_seconds"),
        ({"coverage_blocking": "false"}, "coverage_blocking"),
        ({"protected_recent_messages": -1}, "protected_recent_messages"),
        ({"protected_recent_messages": True}, "protected_recent_messages"),
        ({"api_key": 12345}, "api_key"),
        ({"model": 5}, "model"),
        ({"compaction_profile": None}, "compaction_profile"),
        ({"base_url": None}, "base_url"),
    ],
)
def test_compaction_config_is_refused_when_built(options: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name) as caught:
        CompactionConfig(**options)
    assert "12345" not in str(caught.value)  # an API key is never shown


async def test_a_compaction_config_cannot_be_changed_after_it_was_built(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The config is checked once, when built, and frozen: an assignment is refused
    (``ConfigurationError`` naming the setting), the config stays as it was checked, and a
    changed copy is checked as a new one is."""
    await _session_with_history(manager)
    config = CompactionConfig()
    with pytest.raises(ConfigurationError, match="safety_margin"):
        config.safety_margin = math.nan  # type: ignore[misc]
    assert config.safety_margin == 1.2
    with pytest.raises(ConfigurationError, match="safety_margin"):
        config.replace(safety_margin=math.nan)
    changed = config.replace(safety_margin=1.0)
    assert (changed.safety_margin, config.safety_margin) == (1.0, 1.2)
    assert (await manager.compact_with_result(KEY, 2000, config=changed)).removed_count > 0


# -- the translation seam ------------------------------------------------------------------


class _DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"driver error {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate", ["22003", "22000", "22P02", "54000"])
def test_data_exceptions_from_the_driver_become_invalid_input(sqlstate: str) -> None:
    """Postgres reported an out-of-range integer (22003), or asyncpg an argument it cannot
    encode (22000), as a generic ``DatabaseError``: the value is the problem."""
    error = sa_exc.DBAPIError("INSERT ...", {}, _DriverError(sqlstate))
    assert isinstance(translate(error), InvalidInputError)


def test_a_bare_overflow_error_from_binding_becomes_invalid_input() -> None:
    """sqlite3 raises a bare ``OverflowError`` for an int beyond 64 bits, and SQLAlchemy
    passes it through unwrapped."""
    translated = translate(OverflowError("Python int too large to convert to SQLite INTEGER"))
    assert isinstance(translated, InvalidInputError)
    assert "64-bit" in str(translated)


def test_messages_never_echo_a_huge_value() -> None:
    with pytest.raises(InvalidInputError) as caught:
        SessionContextState(session_id="s", session_key=KEY, state_kind="k" * 100_000)
    assert len(str(caught.value)) < 300
    assert "state_kind" in str(caught.value) and "64" in str(caught.value)
