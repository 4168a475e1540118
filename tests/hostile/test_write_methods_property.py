"""Random values of the wrong type, size and domain for every public write method
(issue 11, "Done when").

Each example picks one write method of ``SessionManager`` or ``SessionStorage`` (the
front doors: the use cases below them trust what these checked), and one
argument (or record field) of it, and passes a random hostile value there: integers beyond
32 and 64 bits, negative numbers, floats, NaN and infinities, bools where integers belong,
strings where integers belong, ``None``, NUL-bearing strings, lone surrogates, very long
strings, bytes, arbitrary objects and nested junk. Exactly one of two things may happen:

* the package's own error (a ``SessionStoreError``) and no row of any table changed; or
* success, and then what was written reads back exactly (types included), and every row
  of the store is still within the models' value domain.

Anything else (a builtin error, a pydantic error, a value that changed on its way, a row
the models would refuse) fails. Both backends; derandomized, a few dozen examples per
method family.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import math
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from opensquilla.session import SessionManager, SessionStorage, usecases
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.db import rows, tables
from opensquilla.session.errors import SessionStoreError
from opensquilla.session.models import (
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)
from opensquilla.session.transfer.store import TransferStore
from tests.helpers import table_snapshot

from .state_cases import SCOPE_STATE_CASES, STATE_CASES

_counter = itertools.count()

# -- hostile values --------------------------------------------------------------------------

_SCALAR_JUNK = st.one_of(
    st.integers(min_value=2**63, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-(2**63) - 1),
    st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), -1, 0, 1, 3]),
    st.sampled_from([math.nan, math.inf, -math.inf, 1.5, -0.0, 2.0, 1e308]),
    st.booleans(),
    st.none(),
    st.sampled_from(
        ["", "  ", "10", "user", "done", "agent:Main:x", "\x00", "a\x00b", "\ud800", "x\udfff"]
    ),
    st.sampled_from(["x" * 5000, "🦑" * 700, "k" * 513]),
    st.text(max_size=8),
    st.binary(max_size=3),
    st.builds(object),
)
JUNK = st.one_of(
    _SCALAR_JUNK,
    st.recursive(
        _SCALAR_JUNK,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
        ),
        max_leaves=6,
    ),
    st.sampled_from([{1, 2}, {"deep": {"nan": [math.nan]}}, [{"ok": "json"}], {"a": [1, 2.5]}]),
)

# -- exactness ------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0 is not True); a JSON
    array may come back as a list where a tuple went in."""
    if isinstance(a, BaseModel) or isinstance(b, BaseModel):
        return type(a) is type(b) and same(a.__dict__, b.__dict__)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# Fields whose stored value is not the given one by design: keys are canonicalised, the
# agent id normalised, an enum member stored as its value, an int cost stored as a float.
CANONICALISED = {
    "session_key",
    "parent_session_key",
    "spawned_by",
    "provenance_source_session_key",
    "agent_id",
}
FLOATS = {"estimated_cost_usd", "total_cost_usd", "billed_cost_usd", "estimated_cost_component_usd"}


def written_as(field: str, value: Any) -> Any:
    """What a record field given ``value`` (and accepted) must read back as."""
    if field in FLOATS and type(value) is int:
        return float(value)
    return value


async def assert_store_in_domain(storage: SessionStorage) -> None:
    """Every row of every table is a value the models accept (as the database returns it:
    a REAL in an integer column, text in a number column, NaN anywhere would fail)."""
    async with storage.engine.connect() as conn:
        for name, model in rows.MODEL_FOR_TABLE.items():
            table = tables.Base.metadata.tables[name]
            result = await conn.execute(rows.select_rows(table, conn))
            for record in rows.to_models(model, conn.dialect.name, result):
                model.model_validate(dict(record.__dict__))


async def reread(storage: SessionStorage, record: _Record) -> _Record | None:
    """``record`` as the store now holds it (by key or id)."""
    if isinstance(record, SessionNode):
        return await storage.get_session(record.session_key)
    if isinstance(record, TranscriptEntry):
        entries = await storage.get_transcript(record.session_id)
        return next((e for e in entries if e.id == record.id), None)
    if isinstance(record, SessionSummary):
        return await storage.get_summary(record.id) if record.id is not None else None
    if isinstance(record, SessionContextState):
        states = await storage.get_context_states(record.session_key, valid_only=False)
        return next((s for s in states if s.id == record.id), None)
    raise AssertionError(f"no reader for {type(record).__name__}")


# -- the harness: a fresh session per example -------------------------------------------------


@dataclass
class Harness:
    manager: SessionManager
    storage: SessionStorage
    key: str
    node: SessionNode
    entries: list[TranscriptEntry]
    summary: SessionSummary

    @property
    def fresh_key(self) -> str:
        return f"agent:prop:fresh{next(_counter)}"


async def prepare(manager: SessionManager, storage: SessionStorage) -> Harness:
    key = f"agent:prop:s{next(_counter)}"
    node = await manager.create(key)
    entries = []
    for n in range(4):
        role = "user" if n % 2 == 0 else "assistant"
        entries.append(await manager.append_message(key, role, f"m{n} " * 40, token_count=400))
    summary = await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=key, summary_text="earlier")
    )
    await storage.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=key, state_kind="s")
    )
    node = await manager.get_session(key) or node
    return Harness(manager, storage, key, node, entries, summary)


Check = Callable[[Any], Awaitable[None]] | None
Case = Callable[[Harness, Any], Awaitable[tuple[Any, Check]]]


def _record_field_check(h: Harness, field: str, value: Any) -> Check:
    """After a record with ``field=value`` was written: it reads back exactly."""

    async def check(result: Any) -> None:
        if not isinstance(result, _Record):
            return
        stored = await reread(h.storage, result)
        assert stored is not None
        assert same(stored, result), (stored, result)
        if field not in CANONICALISED:
            assert same(getattr(stored, field), written_as(field, value)), (field, value)

    return check


async def run_case(h: Harness, case: Case, junk: Any) -> None:
    before = await table_snapshot(h.storage)
    try:
        result, check = await case(h, junk)
    except SessionStoreError:
        after = await table_snapshot(h.storage)
        assert after == before, f"{case.__name__}({junk!r:.80}) refused but wrote"
        return
    except BaseException as exc:  # anything but our own error is a bug
        raise AssertionError(
            f"{case.__name__}({junk!r:.80}) raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    if check is not None:
        await check(result)
    await assert_store_in_domain(h.storage)


def _fields(model: type[_Record], *exclude: str) -> list[str]:
    return [name for name in model.model_fields if name not in exclude]


# -- SessionManager: sessions ---------------------------------------------------------------

PROTECTED = {"session_key", "session_id", "epoch", "created_at", "updated_at"}
PROTECTED |= {"compaction_count", "schema_version"}


def _session_field_cases() -> list[Case]:
    cases: list[Case] = []
    for field in _fields(SessionNode, "session_key"):

        async def create(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            node = await h.manager.create(h.fresh_key, **{field: junk})
            return node, _record_field_check(h, field, junk)

        async def get_or_create(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            node, _ = await h.manager.get_or_create(h.fresh_key, **{field: junk})
            return node, _record_field_check(h, field, junk)

        cases += [create, get_or_create]
        if field not in PROTECTED:

            async def update(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
                node = await h.manager.update(h.key, **{field: junk})
                return node, _record_field_check(h, field, junk)

            cases.append(update)
    return cases


async def create_with_agent(h: Harness, junk: Any) -> tuple[Any, Check]:
    node = await h.manager.create(h.fresh_key, agent_id=junk)
    return node, _record_field_check(h, "agent_id", junk)


async def create_with_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.create(junk), None


async def finish(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.finish(h.key, junk), _record_field_check(h, "status", junk)


async def resume_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.resume(junk), None


async def apply_intent(h: Harness, junk: Any) -> tuple[Any, Check]:
    node, _ = await h.manager.apply_intent(h.key, junk)
    return node, None


async def apply_intent_create(h: Harness, junk: Any) -> tuple[Any, Check]:
    node, _ = await h.manager.apply_intent(h.fresh_key, "continue", label=junk)
    return node, _record_field_check(h, "label", junk)


async def reset_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.reset(junk), None


async def reset_with_report_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.reset_with_report(junk), None


async def archive_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.archive(junk), None


async def delete_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.delete(junk), None


SESSION_CASES: list[Case] = [
    *_session_field_cases(),
    create_with_agent,
    create_with_key,
    finish,
    resume_key,
    apply_intent,
    apply_intent_create,
    reset_key,
    reset_with_report_key,
    archive_key,
    delete_key,
]


# -- SessionManager: transcript and branching -------------------------------------------------

APPEND_ARGS = (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "turn_usage",
    "token_count",
    "provenance",
    "turn_context",
    "message_id",
    "assistant_message_id",
    "metadata",
)
# The entry field an append argument ends up in (the rest: the field of the same name).
APPEND_FIELD = {"provenance": "provenance_kind", "assistant_message_id": "message_id"}


def _append_field_check(h: Harness, entry: TranscriptEntry, argument: str, junk: Any) -> Check:
    """An accepted append argument reads back as given; a provenance mapping, or no message
    id (a random one), as the entry the append returned has it."""
    field = APPEND_FIELD.get(argument, argument)
    derived = argument == "provenance" or (field == "message_id" and junk is None)
    return _record_field_check(h, field, getattr(entry, field) if derived else junk)


def _append_cases() -> list[Case]:
    cases: list[Case] = []
    for argument in APPEND_ARGS:

        async def append(h: Harness, junk: Any, argument: str = argument) -> tuple[Any, Check]:
            values: dict[str, Any] = {"role": "assistant", "content": "hello"}
            values[argument] = junk
            role, content = values.pop("role"), values.pop("content")
            entry = await h.manager.append_message(h.key, role, content, **values)
            return entry, _append_field_check(h, entry, argument, junk)

        cases.append(append)
    return cases


async def append_to_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.append_message(junk, "user", "x"), None


async def provenance_field(h: Harness, junk: Any) -> tuple[Any, Check]:
    entry = await h.manager.append_message(h.key, "user", "x", provenance={"source_tool": junk})
    return entry, _record_field_check(h, "provenance_source_tool", junk)


async def truncate(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.truncate(h.key, junk), None


async def branch_flag(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.branch(h.key, h.fresh_key, fork_transcript=junk), None


async def branch_budget(h: Harness, junk: Any) -> tuple[Any, Check]:
    child = await h.manager.branch(h.key, h.fresh_key, fork_transcript=True, max_fork_tokens=junk)
    return child, _record_field_check(h, "spawn_depth", 1)


async def branch_status(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.branch(h.key, h.fresh_key, status=junk), None


async def branch_before(h: Harness, junk: Any) -> tuple[Any, Check]:
    child = await h.manager.branch(
        h.key, h.fresh_key, fork_transcript=True, fork_before_message_id=junk
    )
    return child, None


async def branch_child_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.branch(h.key, junk), None


def _batch_cases() -> list[Case]:
    """Issue 28: every field of the batch's second message; refused, the whole batch is
    (nothing written); accepted, it reads back as given."""
    cases: list[Case] = []
    for argument in (*APPEND_ARGS, "message"):

        async def append_batch(
            h: Harness, junk: Any, argument: str = argument
        ) -> tuple[Any, Check]:
            second: Any = {"role": "assistant", "content": "hello"}
            if argument == "message":
                second = junk
            else:
                second[argument] = junk
            entries = await h.manager.append_messages(
                h.key, [{"role": "user", "content": "first"}, second]
            )
            if argument == "message" or (argument == "role" and junk is None):
                return entries, None
            return entries[1], _append_field_check(h, entries[1], argument, junk)

        append_batch.__name__ = f"append_messages_{argument}"
        cases.append(append_batch)
    return cases


async def append_messages_list(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.append_messages(h.key, junk), None


async def append_messages_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.append_messages(junk, [{"role": "user", "content": "x"}]), None


async def pop_message_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.pop_message(junk), None


async def delete_entry_id(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.delete_entry(h.key, junk), None


async def delete_entry_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.delete_entry(junk, h.entries[0].id or 0), None


TRANSCRIPT_CASES: list[Case] = [
    *_append_cases(),
    *_batch_cases(),
    append_messages_list,
    append_messages_key,
    pop_message_key,
    delete_entry_id,
    delete_entry_key,
    append_to_key,
    provenance_field,
    truncate,
    branch_flag,
    branch_budget,
    branch_status,
    branch_before,
    branch_child_key,
]


# -- SessionManager: single messages ------------------------------------------------------------


def _prepare_cases() -> list[Case]:
    """A prepared message, written by the caller as the contract says, reads back exactly."""
    cases: list[Case] = []
    for argument in (*APPEND_ARGS, "session_node"):

        async def prepare(h: Harness, junk: Any, argument: str = argument) -> tuple[Any, Check]:
            values: dict[str, Any] = {"role": "assistant", "content": "hello"}
            values[argument] = junk
            role, content = values.pop("role"), values.pop("content")
            entry, epoch = await h.manager.prepare_message(h.key, role, content, **values)
            await h.storage.append_transcript_entry(entry, expected_epoch=epoch)
            await h.manager.notify_message_appended(entry)
            if argument == "session_node":
                return entry, _record_field_check(h, "session_key", None)
            return entry, _append_field_check(h, entry, argument, junk)

        cases.append(prepare)
    return cases


async def remove_message_id(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.remove_message(h.key, junk), None


async def remove_message_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.remove_message(junk, h.entries[0].message_id), None


async def inject_text(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.inject_message(h.key, junk), None


async def inject_provenance(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.inject_message(h.key, "hello", junk), None


async def inject_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.inject_message(junk, "hello"), None


async def rebind_turn_context(h: Harness, junk: Any) -> tuple[Any, Check]:
    message_id = h.entries[0].message_id
    changed = await h.manager.update_message_turn_context(h.key, message_id, junk)

    async def check(result: Any) -> None:
        assert result is True
        rows = await h.manager.get_canonical_transcript(h.key)
        [row] = [e for e in rows if e.message_id == message_id]
        assert same(row.turn_context, junk), (row.turn_context, junk)

    return changed, check


async def rebind_message_id(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.update_message_turn_context(h.key, junk, {"k": "v"}), None


async def notify_entry(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.notify_message_appended(junk), None


MESSAGE_CASES: list[Case] = [
    *_prepare_cases(),
    remove_message_id,
    remove_message_key,
    inject_text,
    inject_provenance,
    inject_key,
    rebind_turn_context,
    rebind_message_id,
    notify_entry,
]


# -- SessionManager: compaction ----------------------------------------------------------------


async def compact_window(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.compact(h.key, junk), None


async def compact_instructions(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.compact(h.key, 1000, custom_instructions=junk), None


def _compact_option_cases() -> list[Case]:
    cases: list[Case] = []
    for option in ("compaction_id", "trigger_reason", "flush_receipt_status"):

        async def compact_option(h: Harness, junk: Any, option: str = option) -> tuple[Any, Check]:
            result = await h.manager.compact_with_result(h.key, 1000, **{option: junk})
            assert result.removed_count > 0, result.skip_reason
            summary = (await h.manager.get_summaries(h.key))[-1]
            if option != "flush_receipt_status" and junk:  # "" and None: the default
                assert same(getattr(summary, option), junk), (option, junk)
            return summary, None

        async def persist_option(h: Harness, junk: Any, option: str = option) -> tuple[Any, Check]:
            kept = [{"role": "assistant", "content": h.entries[-1].content}]
            await h.manager.persist_compaction_result(h.key, "summary", kept, **{option: junk})
            return None, None

        cases += [compact_option, persist_option]
    return cases


def _config_cases() -> list[Case]:
    cases: list[Case] = []
    for name in CompactionConfig.model_fields:
        # The config is checked once, when built, and frozen: junk is refused by the
        # constructor (or by model_copy/model_construct, checked alike), and a compaction is
        # reached only with a config that was accepted.
        async def config_built(h: Harness, junk: Any, name: str = name) -> tuple[Any, Check]:
            settings_ = CompactionConfig(**{name: junk})
            return await h.manager.compact_with_result(h.key, 1000, config=settings_), None

        async def config_copied(h: Harness, junk: Any, name: str = name) -> tuple[Any, Check]:
            settings_ = CompactionConfig().model_copy(update={name: junk})
            return await h.manager.compact_with_result(h.key, 1000, config=settings_), None

        async def config_constructed(h: Harness, junk: Any, name: str = name) -> tuple[Any, Check]:
            settings_ = CompactionConfig.model_construct(**{name: junk})
            return await h.manager.compact_with_result(h.key, 1000, config=settings_), None

        for case in (config_built, config_copied, config_constructed):
            case.__name__ = f"{case.__name__}_{name}"
            cases.append(case)
    return cases


async def persist_summary(h: Harness, junk: Any) -> tuple[Any, Check]:
    kept = [{"role": "assistant", "content": h.entries[-1].content}]
    return await h.manager.persist_compaction_result(h.key, junk, kept), None


async def persist_kept(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.persist_compaction_result(h.key, "summary", junk), None


def _persist_entry_cases() -> list[Case]:
    cases: list[Case] = []
    for field in ("role", "content", "tool_calls", "tool_call_id", "turn_usage"):

        async def persist_entry(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            kept = [{"role": "assistant", "content": "replaced", field: junk}]
            return await h.manager.persist_compaction_result(h.key, "summary", kept), None

        cases.append(persist_entry)
    return cases


async def mark_repair(h: Harness, junk: Any) -> tuple[Any, Check]:
    await h.manager.mark_compaction_repair_status(h.summary, junk)
    stored = await h.storage.get_summary(h.summary.id or 0)
    assert stored is not None and same(stored.flush_receipt_status, junk)
    return None, None


async def mark_repair_summary(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.mark_compaction_repair_status(junk, "safe"), None


async def mark_flush(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.mark_compaction_flush_receipt_status(h.key, junk, "safe"), None


async def mark_flush_status(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.mark_compaction_flush_receipt_status(h.key, "cmp", junk), None


COMPACTION_CASES: list[Case] = [
    compact_window,
    compact_instructions,
    *_compact_option_cases(),
    *_config_cases(),
    persist_summary,
    persist_kept,
    *_persist_entry_cases(),
    mark_repair,
    mark_repair_summary,
    mark_flush,
    mark_flush_status,
]


# -- SessionManager: context states and retention ---------------------------------------------


def _state_cases() -> list[Case]:
    cases: list[Case] = []
    for field in _fields(SessionContextState, "id"):

        async def save_state(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            values: dict[str, Any] = {"session_id": h.node.session_id, "session_key": h.key}
            values.update({"state_kind": "k", field: junk})
            state = SessionContextState(**values)
            return await h.manager.save_context_state(state), _record_field_check(h, field, junk)

        cases.append(save_state)
    return cases


def _invalidate_cases() -> list[Case]:
    cases: list[Case] = []
    for argument in ("provider", "state_kind", "reason"):

        async def invalidate(h: Harness, junk: Any, argument: str = argument) -> tuple[Any, Check]:
            count = await h.manager.invalidate_context_states(h.key, **{argument: junk})
            return count, None

        cases.append(invalidate)
    return cases


async def save_state_object(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.save_context_state(junk), None


async def prune(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.prune_stale(junk), None


async def cap(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.cap_entries(junk), None


STATE_AND_RETENTION_CASES: list[Case] = [
    *_state_cases(),
    *_invalidate_cases(),
    save_state_object,
    prune,
    cap,
]


# -- SessionManager: usage counters -------------------------------------------------------------

USAGE_ARGS = ("input_tokens", "output_tokens", "cache_read", "cache_write", "cost_usd")
USAGE_COUNTERS = (*USAGE_ARGS[:4], "total_tokens", "missing_cost_entries")
USAGE_COSTS = ("total_cost_usd", "estimated_cost_usd", "billed_cost_usd")


def _usage_check(h: Harness, before: SessionNode, argument: str, junk: Any) -> Check:
    """An accepted usage argument was added to its counter exactly, and to nothing else."""

    async def check(result: Any) -> None:
        assert isinstance(result, SessionNode)
        stored = await h.storage.get_session(h.key)
        assert stored is not None and same(stored, result), (stored, result)
        for name in (*USAGE_COUNTERS, *USAGE_COSTS):
            added = getattr(stored, name) - getattr(before, name)
            expected: Any = 0
            if name == argument or (name == "total_tokens" and argument in USAGE_ARGS[:2]):
                expected = junk
            elif argument == "cost_usd" and name in USAGE_COSTS:
                expected = float(junk)
            assert added == expected and type(getattr(stored, name)) is type(
                getattr(before, name)
            ), (name, junk)

    return check


def _usage_cases() -> list[Case]:
    cases: list[Case] = []
    for argument in USAGE_ARGS:

        async def usage(h: Harness, junk: Any, argument: str = argument) -> tuple[Any, Check]:
            values: dict[str, Any] = {argument: junk}
            if argument == "cost_usd":
                values["cost_source"] = "provider_billed"
            before = await h.manager.get_session(h.key)
            assert before is not None
            node = await h.manager.record_usage(h.key, **values)
            return node, _usage_check(h, before, argument, junk)

        usage.__name__ = f"usage_{argument}"
        cases.append(usage)
    return cases


async def usage_cost_source(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.record_usage(h.key, cost_usd=0.5, cost_source=junk), None


async def usage_source_alone(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.record_usage(h.key, input_tokens=1, cost_source=junk), None


async def usage_key(h: Harness, junk: Any) -> tuple[Any, Check]:
    return await h.manager.record_usage(junk, input_tokens=1), None


USAGE_CASES: list[Case] = [*_usage_cases(), usage_cost_source, usage_source_alone, usage_key]


# -- SessionStorage -------------------------------------------------------------------------


def _storage_record_cases() -> list[Case]:
    cases: list[Case] = []
    for field in _fields(SessionNode):

        async def upsert(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            values: dict[str, Any] = {"session_key": h.fresh_key, field: junk}
            node = SessionNode(**values)
            await h.storage.upsert_session(node)
            return node, _record_field_check(h, field, junk)

        cases.append(upsert)
    for field in _fields(TranscriptEntry, "id"):

        async def append_entry(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            values: dict[str, Any] = {"session_id": h.node.session_id, "session_key": h.key}
            values.update({"role": "user", field: junk})
            entry = TranscriptEntry(**values)
            await h.storage.append_transcript_entry(entry)
            return entry, _record_field_check(h, field, junk)

        cases.append(append_entry)
    for field in _fields(TranscriptEntry, "id", "created_at", "message_id"):

        async def upsert_entry(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            """The in-place path: the id of a live row, every other column replaced."""
            values: dict[str, Any] = {"session_id": h.node.session_id, "session_key": h.key}
            values.update({"role": "user", "message_id": h.entries[0].message_id, field: junk})
            entry = TranscriptEntry(**values)
            await h.storage.upsert_transcript_entry_and_touch(
                entry, expected_epoch=h.node.epoch, updated_at=1
            )
            return entry, _record_field_check(h, field, junk)

        cases.append(upsert_entry)
    for field in _fields(SessionSummary, "id", "compaction_index"):

        async def save_summary(h: Harness, junk: Any, field: str = field) -> tuple[Any, Check]:
            values: dict[str, Any] = {"session_id": h.node.session_id, "session_key": h.key}
            values.update({"summary_text": "s", field: junk})
            summary = SessionSummary(**values)
            return await h.storage.save_summary(summary), _record_field_check(h, field, junk)

        cases.append(save_summary)
    return cases


def _storage_argument_cases() -> list[Case]:
    def entry(h: Harness) -> TranscriptEntry:
        return TranscriptEntry(session_id=h.node.session_id, session_key=h.key, role="user")

    calls: dict[str, Callable[[Harness, Any], Awaitable[Any]]] = {
        "update_session_fields": lambda h, j: h.storage.update_session_fields(
            h.key, {"label": "x", "spawn_depth": j}
        ),
        "update_session_fields_values": lambda h, j: h.storage.update_session_fields(h.key, j),
        "finish_status": lambda h, j: h.storage.finish_session(h.key, j, 1),
        "finish_now": lambda h, j: h.storage.finish_session(h.key, "done", j),
        "increment_epoch": lambda h, j: h.storage.increment_epoch(j),
        "append_expected_epoch": lambda h, j: h.storage.append_transcript_entry(
            entry(h), expected_epoch=j
        ),
        "append_entry_object": lambda h, j: h.storage.append_transcript_entry(j),
        "append_message_epoch": lambda h, j: h.storage.append_message_entry(
            entry(h), expected_epoch=j, now=1
        ),
        "append_message_now": lambda h, j: h.storage.append_message_entry(
            entry(h), expected_epoch=h.node.epoch, now=j
        ),
        "append_message_delta": lambda h, j: h.storage.append_message_entry(
            entry(h), expected_epoch=h.node.epoch, now=1, token_delta=j
        ),
        "upsert_epoch": lambda h, j: h.storage.upsert_transcript_entry_and_touch(
            entry(h), expected_epoch=j, updated_at=1
        ),
        "upsert_updated_at": lambda h, j: h.storage.upsert_transcript_entry_and_touch(
            entry(h), expected_epoch=h.node.epoch, updated_at=j
        ),
        "upsert_delta": lambda h, j: h.storage.upsert_transcript_entry_and_touch(
            entry(h), expected_epoch=h.node.epoch, updated_at=1, token_delta=j
        ),
        "upsert_entry_object": lambda h, j: h.storage.upsert_transcript_entry_and_touch(
            j, expected_epoch=h.node.epoch, updated_at=1
        ),
        "delete_entry_session_id": lambda h, j: h.storage.delete_transcript_entry(
            j, h.entries[0].message_id
        ),
        "delete_entry_message_id": lambda h, j: h.storage.delete_transcript_entry(
            h.node.session_id, j
        ),
        "turn_context_key": lambda h, j: h.storage.update_transcript_turn_context(
            j, h.entries[0].message_id, {"k": "v"}
        ),
        "turn_context_message_id": lambda h, j: h.storage.update_transcript_turn_context(
            h.key, j, {"k": "v"}
        ),
        "turn_context_value": lambda h, j: h.storage.update_transcript_turn_context(
            h.key, h.entries[0].message_id, j
        ),
        "delete_transcript": lambda h, j: h.storage.delete_transcript(j),
        "delete_summaries": lambda h, j: h.storage.delete_summaries(j),
        "flush_status_id": lambda h, j: h.storage.update_summary_flush_receipt_status(j, "safe"),
        "flush_status": lambda h, j: h.storage.update_summary_flush_receipt_status(
            h.summary.id or 0, j
        ),
        "flush_by_compaction": lambda h, j: (
            h.storage.update_summary_flush_receipt_status_by_compaction(h.key, j, "safe")
        ),
        "save_state_object": lambda h, j: h.storage.save_context_state(j),
        "save_summary_object": lambda h, j: h.storage.save_summary(j),
        "upsert_object": lambda h, j: h.storage.upsert_session(j),
        "create_object": lambda h, j: h.storage.create_session(j),
        "invalidate_reason": lambda h, j: h.storage.invalidate_context_states(h.key, reason=j),
        "invalidate_provider": lambda h, j: h.storage.invalidate_context_states(h.key, provider=j),
        "delete_session": lambda h, j: h.storage.delete_session(j),
        "lease_key": lambda h, j: h.storage.acquire_compaction_lease(j, "s", "f", "h", 1000),
        "lease_holder": lambda h, j: h.storage.acquire_compaction_lease(h.key, "s", "f", j, 1),
        "lease_ttl": lambda h, j: h.storage.acquire_compaction_lease(h.key, "s", "f", "h", j),
        "lease_renew": lambda h, j: h.storage.renew_compaction_lease(h.key, "h", j),
        "lease_finish": lambda h, j: h.storage.finish_compaction_lease(h.key, "h", j),
        "lease_release": lambda h, j: h.storage.release_compaction_lease(j, "h"),
    }
    cases: list[Case] = []
    for name, call in calls.items():

        async def storage_call(
            h: Harness, junk: Any, call: Callable[[Harness, Any], Awaitable[Any]] = call
        ) -> tuple[Any, Check]:
            return await call(h, junk), None

        storage_call.__name__ = f"storage_{name}"
        cases.append(storage_call)
    return cases


STORAGE_CASES: list[Case] = [
    *_storage_record_cases(),
    *_storage_argument_cases(),
]

# -- every write method is covered -----------------------------------------------------------

MANAGER_READS = {
    "get_session",
    "get_context_view",
    # The plan compact_with_result would make, from one read: nothing written
    # (tests/compaction/test_needs_compaction.py).
    "needs_compaction",
    "list_sessions",
    "count_sessions",
    "get_transcript",
    "get_canonical_transcript",
    "get_canonical_transcript_page",
    "get_canonical_transcript_coverage",
    "is_canonical_transcript_complete",
    "iter_canonical_transcript",  # an async iterator, listed for the reader
    "count_transcript_entries",
    "get_summaries",
    "get_latest_summary",
    "get_context_states",
    "get_compaction_context_records",
    "list_degraded_compactions",
    "get_compaction",
    "get_compaction_preimage",
    "capture_compaction_source",
    "capture_session_archive",
    # Writes a file, or with archive_store="database" one session_archives row, never
    # session data: it takes models already checked, and the archive encoder keeps every
    # value they hold (tests/manager/test_session_archive.py, test_archive_store.py).
    "write_session_archive",
    "list_session_archives",
    "read_session_archive",
    "archive_report",
    "stats",
    "preview_reset",
    "preview_truncate",
    "preview_prune_stale",
    "preview_cap_entries",
    "list_sessions_page",
    "get_recent_transcript",
    "get_transcript_lines",
    "get_canonical_transcript_entry",
    "read_transcript",
    "count_transcript_entries_batch",
    "list_user_transcript_content_batch",
    "search",
    "search_transcript",
    "search_transcript_like",
    "search_sessions_by_title",
    # Plans: decided from one read and returned, nothing written (test_prepared_intents.py).
    "prepare_intent",
    "prepare_prefix_branch",
    "get_latest_context_state",
    "get_state",
    "get_scope_state",
}
MANAGER_WRITES = {
    "create": SESSION_CASES,
    "get_or_create": SESSION_CASES,
    "update": SESSION_CASES,
    "finish": SESSION_CASES,
    "archive": SESSION_CASES,  # finish(status="done"): no argument of its own but the key
    "resume": SESSION_CASES,
    "apply_intent": SESSION_CASES,
    "reset": SESSION_CASES,
    "reset_with_report": SESSION_CASES,  # what reset() runs
    "delete": SESSION_CASES,
    "append_message": TRANSCRIPT_CASES,
    "append_messages": TRANSCRIPT_CASES,
    "pop_message": TRANSCRIPT_CASES,
    "delete_entry": TRANSCRIPT_CASES,
    "truncate": TRANSCRIPT_CASES,
    "branch": TRANSCRIPT_CASES,
    "compact": COMPACTION_CASES,
    "compact_with_result": COMPACTION_CASES,
    "persist_compaction_result": COMPACTION_CASES,
    "mark_compaction_repair_status": COMPACTION_CASES,
    "mark_compaction_flush_receipt_status": COMPACTION_CASES,
    "save_context_state": STATE_AND_RETENTION_CASES,
    "invalidate_context_states": STATE_AND_RETENTION_CASES,
    "prune_stale": STATE_AND_RETENTION_CASES,
    "cap_entries": STATE_AND_RETENTION_CASES,
    "remove_message": MESSAGE_CASES,
    "inject_message": MESSAGE_CASES,
    "update_message_turn_context": MESSAGE_CASES,
    "prepare_message": MESSAGE_CASES,  # writes nothing itself: the caller writes the entry
    "notify_message_appended": MESSAGE_CASES,
    "record_usage": USAGE_CASES,
    # Fed hostile values by tests/hostile/test_state_hostile.py (state tables included).
    "update_state": STATE_CASES,
    "update_scope_state": SCOPE_STATE_CASES,
}
STORAGE_NOT_WRITES = {
    # lifecycle
    "connect",
    "connect_without_migrating",
    "close",
    "open",
    # reads
    "get_session",
    "list_sessions",
    "count_sessions",
    "get_epoch",
    "get_transcript",
    "get_canonical_transcript",
    "get_canonical_transcript_page",
    "get_canonical_transcript_coverage",
    "is_canonical_transcript_complete",
    "count_transcript_entries",
    "get_compacted_transcript_entries",
    "get_all_summaries",
    "get_latest_summary",
    "get_summary",
    "list_degraded_summaries",
    "get_context_states",
    "list_sessions_page",
    "get_recent_transcript",
    "get_canonical_transcript_entry",
    "count_transcript_entries_batch",
    "list_user_transcript_content_batch",
    "read_compaction_lease",
    "list_session_archives",
    "read_session_archive",
    "search_words",
    "search_substrings",
    "search_transcript",
    "search_transcript_like",
    "search_sessions_by_title",
}
# Whole-session import and copy write through the transfer store, below the storage:
# ``TransferStore.insert`` (what ``insert_session_rows`` was) checks every value of a block
# before writing (tests/hostile/test_import_all_or_nothing.py); it takes rows, not
# arguments. Its other methods read.
TRANSFER_NOT_WRITES = {"all_keys", "existing", "read", "row_ids_in_use", "generation_holders"}
TRANSFER_ELSEWHERE = {"insert"}
STORAGE_WRITES = {
    "upsert_session": "upsert",
    "create_session": "storage_create_object",
    "update_session_fields": "storage_update_session_fields",
    "finish_session": "storage_finish_status",
    "increment_epoch": "storage_increment_epoch",
    "append_transcript_entry": "append_entry",
    "append_message_entry": "storage_append_message_delta",
    "delete_transcript": "storage_delete_transcript",
    "save_summary": "save_summary",
    "delete_summaries": "storage_delete_summaries",
    "update_summary_flush_receipt_status": "storage_flush_status",
    "update_summary_flush_receipt_status_by_compaction": "storage_flush_by_compaction",
    "save_context_state": "storage_save_state_object",
    "invalidate_context_states": "storage_invalidate_reason",
    "delete_session": "storage_delete_session",
    "upsert_transcript_entry_and_touch": "upsert_entry",
    "delete_transcript_entry": "storage_delete_entry_message_id",
    "update_transcript_turn_context": "storage_turn_context_value",
    "acquire_compaction_lease": "storage_lease_key",
    "renew_compaction_lease": "storage_lease_renew",
    "finish_compaction_lease": "storage_lease_finish",
    "release_compaction_lease": "storage_lease_release",
}
# The use cases (issue 27's one route) take the unit of work and trust what their front
# door checked: they are fed hostile values through the manager and storage methods above,
# and none takes the storage (checked below).


def _public_coroutines(kind: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(kind, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }


def _usecase_functions() -> set[str]:
    """``module.function`` of every public coroutine function of the use-case modules
    (packages included) whose first parameter is the storage."""
    names = set()
    for info in pkgutil.walk_packages(usecases.__path__, f"{usecases.__name__}."):
        module = importlib.import_module(info.name)
        for name, function in inspect.getmembers(module, inspect.iscoroutinefunction):
            if name.startswith("_") or function.__module__ != module.__name__:
                continue
            if list(inspect.signature(function).parameters)[:1] == ["storage"]:
                names.add(f"{info.name}.{name}")
    return names


def test_every_public_write_method_has_hostile_cases() -> None:
    """A new write method must be added here (and so fed hostile values) to pass."""
    manager_writes = _public_coroutines(SessionManager) - MANAGER_READS
    assert manager_writes == set(MANAGER_WRITES)
    storage_writes = _public_coroutines(SessionStorage) - STORAGE_NOT_WRITES
    assert storage_writes == set(STORAGE_WRITES)
    assert _public_coroutines(TransferStore) - TRANSFER_NOT_WRITES == TRANSFER_ELSEWHERE
    case_names = {case.__name__ for case in STORAGE_CASES}
    assert set(STORAGE_WRITES.values()) <= case_names
    assert _usecase_functions() == set(), "a use case takes the unit of work, not the storage"


# -- the properties ---------------------------------------------------------------------------

_SETTINGS = settings(
    max_examples=35,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(case=st.sampled_from(SESSION_CASES), junk=JUNK)
async def test_session_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@_SETTINGS
@given(case=st.sampled_from(TRANSCRIPT_CASES), junk=JUNK)
async def test_transcript_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@_SETTINGS
@given(case=st.sampled_from(MESSAGE_CASES), junk=JUNK)
async def test_message_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@_SETTINGS
@given(case=st.sampled_from(COMPACTION_CASES), junk=JUNK)
async def test_compaction_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@_SETTINGS
@given(case=st.sampled_from(STATE_AND_RETENTION_CASES), junk=JUNK)
async def test_state_and_retention_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@_SETTINGS
@given(case=st.sampled_from(USAGE_CASES), junk=JUNK)
async def test_usage_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)


@settings(
    max_examples=50,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=st.sampled_from(STORAGE_CASES), junk=JUNK)
async def test_storage_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, storage: SessionStorage, case: Case, junk: Any
) -> None:
    await run_case(await prepare(manager, storage), case, junk)
