"""Issue 27, check once: one manager append canonicalises its key once and checks each of
its fields once, at the front door; below it the entry is built without validation and no
layer checks the values again (both backends).

Spies: the key cache behind ``canonicalize_session_key`` (every call of it, whatever module
imported the name, passes there), every ``check_*`` helper bound in a module of the package
(by the argument name it checks), the front door's one validation of the JSON and
provenance fields, and the entry model's validating constructor.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage, keys
from opensquilla.session.models import TranscriptEntry, checks
from opensquilla.session.models import messages as message_models

KEY = "agent:main:checked-once"
CHECKS = (
    "check_text",
    "check_optional_text",
    "check_integer",
    "check_optional_integer",
    "check_millis",
    "check_record",
    "check_flag",
)


class Spies:
    def __init__(self) -> None:
        self.keys = 0
        self.fields: Counter[str] = Counter()
        self.validated = 0
        self.entries_validated = 0


def _spies(monkeypatch: pytest.MonkeyPatch) -> Spies:
    seen = Spies()
    remembered = keys._remembered_canonical_key

    def canonical(key: str) -> Any:
        seen.keys += 1
        return remembered(key)

    monkeypatch.setattr(keys, "_remembered_canonical_key", canonical)

    def spy(original: Callable[..., Any]) -> Callable[..., Any]:
        def checked(name: str, *args: Any, **kwargs: Any) -> Any:
            seen.fields[name] += 1
            return original(name, *args, **kwargs)

        return checked

    for check in CHECKS:
        original = getattr(checks, check)
        replacement = spy(original)
        for module in list(sys.modules.values()):
            # Not checks.py itself: its helpers call one another (optional -> plain).
            if module is None or module is checks:
                continue
            ours = module.__name__.startswith("opensquilla.session")
            if ours and getattr(module, check, None) is original:
                monkeypatch.setattr(module, check, replacement)

    validate = message_models._VALIDATE_CHECKED

    def validated(values: Any) -> Any:
        seen.validated += 1
        return validate(values)

    monkeypatch.setattr(message_models, "_VALIDATE_CHECKED", validated)
    construct = TranscriptEntry.__init__

    def constructed(self: TranscriptEntry, /, **data: Any) -> None:
        seen.entries_validated += 1
        construct(self, **data)

    monkeypatch.setattr(TranscriptEntry, "__init__", constructed)
    return seen


async def _warm(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # the cache, SQLite's view look-up


@pytest.mark.parametrize("by_id", [False, True], ids=["append", "upsert"])
async def test_one_append_canonicalises_once_and_checks_each_field_once(
    manager: SessionManager, storage: SessionStorage, by_id: bool
) -> None:
    await _warm(manager)
    # Patched after the warm-up, so only the append is counted.
    with pytest.MonkeyPatch.context() as patch:
        seen = _spies(patch)
        entry = await manager.append_message(
            KEY,
            "assistant",
            "hi",
            token_count=5,
            tool_calls=[{"id": "call-1", "type": "function"}],
            turn_context={"turn": 1},
            provenance={"kind": "relay", "source_session_key": "agent:Main:elsewhere"},
            **({"message_id": "reply-1"} if by_id else {}),
        )
    assert seen.keys == 1 + 1  # the append's key, and the provenance's own source key
    assert seen.validated == 1  # the JSON and provenance fields, together, once
    assert seen.entries_validated == 0  # the entry is built from checked values
    once = {"role": 1, "content": 1, "token_count": 1}
    assert seen.fields == Counter({**once, **({"message_id": 1} if by_id else {})})
    assert entry.id is not None
    assert entry.provenance_source_session_key == "agent:main:elsewhere"
    stored = await manager.get_canonical_transcript_entry(KEY, entry.message_id)
    assert stored is not None and stored.tool_calls == [{"id": "call-1", "type": "function"}]


async def test_a_plain_append_validates_nothing_twice(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """No JSON, no provenance: nothing for pydantic to check at all."""
    await _warm(manager)
    with pytest.MonkeyPatch.context() as patch:
        seen = _spies(patch)
        await manager.append_message(KEY, "user", "plain", token_count=1)
    assert seen.keys == 1
    assert seen.validated == 0 and seen.entries_validated == 0
    assert seen.fields == Counter({"role": 1, "content": 1, "token_count": 1})
