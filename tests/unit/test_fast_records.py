"""The read path builds records by hand (``_Record.from_rows``): pinned to pydantic's own.

``from_rows`` fills a record's ``__dict__`` and pydantic's per-instance slots itself, and
the records of one read share one fields-set object. If pydantic ever changes what an
instance holds, these tests fail: a record built by the fast path must be
indistinguishable from one built by validation, field by field and type by type, and
behave the same under ``model_dump``, equality, assignment, ``model_copy``, copying and
pickling, for every table's model.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from opensquilla.session.db.rows import MODEL_FOR_TABLE
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)

SAMPLES: dict[type[_Record], dict[str, Any]] = {
    SessionNode: {
        "session_key": "agent:main:x",
        "session_id": "sid-1",
        "created_at": 1_700_000_000_000,
        "updated_at": 1_700_000_000_001,
        "label": "L",
        "epoch": 4,
        "total_tokens_fresh": True,
        "fast_mode": True,
        "estimated_cost_usd": 1.5,
        "total_cost_usd": 0.0,
        "delivery_context": {"channel": "c", "nested": [1, 2.5, None, {"x": True}]},
        "origin": {"k": "v"},
        "started_at": 1_700_000_000_000,
    },
    TranscriptEntry: {
        "id": 7,
        "session_id": "s",
        "session_key": "k",
        "message_id": "m-1",
        "created_at": 1_700_000_000_002,
        "role": "assistant",
        "content": "hi\x00there",
        "tool_calls": [{"id": "call_1", "type": "function"}],
        "turn_usage": {"input": 3, "cost": 0.25},
        "turn_context": {"x": None},
        "token_count": 5,
    },
    CompactedTranscriptEntry: {
        "id": 3,
        "session_id": "s",
        "session_key": "k",
        "compaction_id": "cmp_1",
        "compaction_index": 2,
        "original_entry_id": 5,
        "message_id": "m-2",
        "created_at": 1_700_000_000_003,
        "archived_at": 1_700_000_000_004,
        "role": "tool",
        "content": "done",
        "tool_call_id": "call_1",
    },
    SessionSummary: {
        "id": 9,
        "session_id": "s",
        "session_key": "k",
        "summary_text": "t",
        "summary_payload": {"a": [1, "b"]},
        "missing_obligations": ["x"],
        "tokens_before": 10,
        "created_at": 1_700_000_000_005,
    },
    SessionContextState: {
        "id": 4,
        "session_id": "s",
        "session_key": "k",
        "state_kind": "structured_summary_v1",
        "payload": {"a": 1.0},
        "portable": True,
        "valid": False,
        "expires_at": 1_800_000_000_000,
        "created_at": 1_700_000_000_006,
    },
}
MODELS = list(SAMPLES)


def validated(model: type[_Record]) -> _Record:
    """The sample validated from a complete row (every field given, as a read gives)."""
    return model(**model(**SAMPLES[model]).__dict__)


def fast(model: type[_Record], count: int = 1) -> list[_Record]:
    """``count`` records built by the read path from the validated record's values."""
    fields = tuple(model.model_fields)
    source = validated(model)
    row = tuple(copy.deepcopy(getattr(source, name)) for name in fields)
    return model.from_rows([row] * count, fields)


def test_every_table_model_is_sampled() -> None:
    assert set(SAMPLES) == set(MODEL_FOR_TABLE.values())


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_fast_record_is_the_validated_one(model: type[_Record]) -> None:
    expected = validated(model)
    (built,) = fast(model)
    assert type(built) is model
    for name in model.model_fields:
        value, wanted = getattr(built, name), getattr(expected, name)
        assert value == wanted, name
        assert type(value) is type(wanted), name
    assert built == expected
    assert built.model_dump() == expected.model_dump()
    assert built.model_dump_json() == expected.model_dump_json()
    assert built.model_fields_set == expected.model_fields_set == set(model.model_fields)
    assert built.__pydantic_extra__ == expected.__pydantic_extra__
    assert built.__pydantic_private__ == expected.__pydantic_private__
    assert repr(built) == repr(expected)
    # pydantic's own trusted-data path builds the same instance state
    constructed = model.model_construct(**expected.__dict__)
    for slot in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__"):
        assert getattr(built, slot) == getattr(constructed, slot), slot


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_assignment_is_validated_and_stays_on_its_record(model: type[_Record]) -> None:
    first, second = fast(model, 2)
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__  # shared, read-only
    with pytest.raises(InvalidInputError):
        first.session_key = 5  # type: ignore[assignment]
    first.session_key = "agent:main:changed"
    assert first.session_key == "agent:main:changed"
    assert second.session_key == SAMPLES[model]["session_key"]
    assert first.model_fields_set == second.model_fields_set == set(model.model_fields)
    assert second == validated(model)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_copies_and_pickles_are_independent_equal_records(model: type[_Record]) -> None:
    (built,) = fast(model)
    updated = built.model_copy(update={"session_key": "agent:main:copy"})
    assert updated.session_key == "agent:main:copy"
    assert built.session_key == SAMPLES[model]["session_key"]
    assert updated.__pydantic_fields_set__ is not built.__pydantic_fields_set__
    with pytest.raises(InvalidInputError):
        built.model_copy(update={"session_key": 5})
    for duplicate in (
        built.model_copy(),
        built.model_copy(deep=True),
        copy.copy(built),
        copy.deepcopy(built),
        pickle.loads(pickle.dumps(built)),
    ):
        assert duplicate == built
        assert duplicate.model_dump() == built.model_dump()
        assert duplicate.model_fields_set == built.model_fields_set
        assert duplicate.__pydantic_fields_set__ is not built.__pydantic_fields_set__


def test_converters_apply_to_non_null_values_only() -> None:
    fields = tuple(TranscriptEntry.model_fields)
    base = dict(SAMPLES[TranscriptEntry])
    present = tuple(validated(TranscriptEntry).__dict__[name] for name in fields)
    index = fields.index("tool_calls")
    as_text = (*present[:index], '[{"id": "call_1", "type": "function"}]', *present[index + 1 :])
    as_null = (*present[:index], None, *present[index + 1 :])
    seen: list[Any] = []

    def decode(value: Any) -> Any:
        seen.append(value)
        return [{"id": "call_1", "type": "function"}]

    text_row, null_row = TranscriptEntry.from_rows(
        [as_text, as_null], fields, (("tool_calls", decode),)
    )
    assert seen == ['[{"id": "call_1", "type": "function"}]']
    assert text_row == TranscriptEntry(**base)
    assert null_row.tool_calls is None


def test_from_row_builds_one_record_by_field_name() -> None:
    expected = validated(SessionSummary)
    built = SessionSummary.from_row(dict(expected.__dict__))
    assert built == expected
    assert built.__dict__ is not expected.__dict__


def test_rows_of_another_length_or_repeated_fields_are_refused() -> None:
    fields = tuple(TranscriptEntry.model_fields)
    row = tuple(validated(TranscriptEntry).__dict__[name] for name in fields)
    for bad in (row[:-1], (*row, None)):
        with pytest.raises(ValueError):
            TranscriptEntry.from_rows([row, bad], fields)
    with pytest.raises(ValueError):
        TranscriptEntry.from_rows([(*row, row[0])], (*fields, fields[0]))
    with pytest.raises(ValueError):
        TranscriptEntry.from_rows([row], fields, (("not_a_field", str),))
    assert TranscriptEntry.from_rows([], fields) == []


def test_given_fields_are_the_same_in_every_record_and_keep_the_field_order() -> None:
    fields = tuple(TranscriptEntry.model_fields)
    full = tuple(validated(TranscriptEntry).__dict__[name] for name in fields)
    index = fields.index("session_id")
    read = fields[:index] + fields[index + 1 :]
    row = full[:index] + full[index + 1 :]
    first, second = TranscriptEntry.from_rows([row, row], read, given={"session_id": "s"})
    (expected,) = TranscriptEntry.from_rows([full], fields)
    assert first == second == expected
    assert list(first.__dict__) == list(fields)  # model_dump and repr follow this order
    assert first.model_fields_set == set(fields)
    with pytest.raises(ValueError):  # the rows' fields out of the model's order
        TranscriptEntry.from_rows([row[::-1]], read[::-1], given={"session_id": "s"})
    with pytest.raises(ValueError):  # a given field the rows hold too
        TranscriptEntry.from_rows([full], fields, given={"session_id": "s"})
