"""Hostile cases of the state calls (``update_state``, ``update_scope_state``), for
``test_write_methods_property.py``'s inventory and ``test_state_hostile.py``'s property:
one argument (or one value inside ``changes``) gets a random hostile value. Either the
package's error and no row of any table (the state tables included) changed, or success
and the state reads back exactly as merged, one revision on."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from opensquilla.session import ScopeState, SessionManager, SessionState
from opensquilla.session.db.repos.states import scope_states, session_states
from opensquilla.session.errors import SessionStoreError
from tests.helpers import table_snapshot

_counter = itertools.count()


@dataclass
class StateHarness:
    manager: SessionManager
    key: str
    scope_id: str


async def prepare_state(manager: SessionManager) -> StateHarness:
    serial = next(_counter)
    key = f"agent:prop:state{serial}"
    await manager.create(key)
    await manager.update_state(key, {"kept": [1, "two"], "other": None})
    scope_id = f"scope-{serial}"
    await manager.update_scope_state("app", scope_id, {"kept": {"n": 1}})
    return StateHarness(manager, key, scope_id)


async def snapshot(manager: SessionManager) -> dict[str, list[tuple[Any, ...]]]:
    tables = await table_snapshot(manager.storage)
    async with manager.storage.engine.connect() as conn:
        for table in (session_states, scope_states):
            query = sa.select(table).order_by(*table.primary_key.columns)
            tables[table.name] = [tuple(row) for row in await conn.execute(query)]
    return tables


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


Result = tuple[str, dict[str, Any], int]  # which state, the state expected, the revision
StateCase = Callable[[StateHarness, Any], Awaitable[Result]]


async def _session(h: StateHarness, changes: Any, remove: Any = (), expected: Any = None) -> Result:
    before = await h.manager.get_state(h.key)
    revision = await h.manager.update_state(h.key, changes, expected, remove=remove)
    merged = {**before.state, **changes}
    for name in remove:
        merged.pop(name, None)
    return "session", merged, revision


async def _scope(h: StateHarness, changes: Any, remove: Any = (), expected: Any = None) -> Result:
    before = await h.manager.get_scope_state("app", h.scope_id)
    revision = await h.manager.update_scope_state(
        "app", h.scope_id, changes, expected, remove=remove
    )
    merged = {**before.state, **changes}
    for name in remove:
        merged.pop(name, None)
    return "scope", merged, revision


async def update_state_changes(h: StateHarness, junk: Any) -> Result:
    return await _session(h, junk)


async def update_state_value(h: StateHarness, junk: Any) -> Result:
    return await _session(h, {"v": junk, "kept": {"nested": [junk]}})


async def update_state_key(h: StateHarness, junk: Any) -> Result:
    try:
        changes: Any = {junk: 1}
    except TypeError:  # unhashable: no dict can hold it; a list of pairs is refused too
        changes = [(junk, 1)]
    return await _session(h, changes)


async def update_state_remove(h: StateHarness, junk: Any) -> Result:
    return await _session(h, {"x": 1}, remove=junk)


async def update_state_expected(h: StateHarness, junk: Any) -> Result:
    return await _session(h, {"x": 1}, expected=junk)


async def update_state_session_key(h: StateHarness, junk: Any) -> Result:
    await h.manager.update_state(junk, {"x": 1})
    raise AssertionError("a hostile key found a session")  # no session has such a key


async def update_scope_state_changes(h: StateHarness, junk: Any) -> Result:
    return await _scope(h, junk)


async def update_scope_state_value(h: StateHarness, junk: Any) -> Result:
    return await _scope(h, {"v": junk})


async def update_scope_state_remove(h: StateHarness, junk: Any) -> Result:
    return await _scope(h, {"x": 1}, remove=junk)


async def update_scope_state_expected(h: StateHarness, junk: Any) -> Result:
    return await _scope(h, {"x": 1}, expected=junk)


async def update_scope_state_scope(h: StateHarness, junk: Any) -> Result:
    revision = await h.manager.update_scope_state(junk, h.scope_id, {"x": 1})
    state = await h.manager.get_scope_state(junk, h.scope_id)
    return "checked", state.state, revision


async def update_scope_state_scope_id(h: StateHarness, junk: Any) -> Result:
    revision = await h.manager.update_scope_state("user", junk, {"x": 1})
    state = await h.manager.get_scope_state("user", junk)
    assert (state.state, state.revision) == ({"x": 1}, revision)
    return "checked", state.state, revision


STATE_CASES: list[StateCase] = [
    update_state_changes,
    update_state_value,
    update_state_key,
    update_state_remove,
    update_state_expected,
    update_state_session_key,
]
SCOPE_STATE_CASES: list[StateCase] = [
    update_scope_state_changes,
    update_scope_state_value,
    update_scope_state_remove,
    update_scope_state_expected,
    update_scope_state_scope,
    update_scope_state_scope_id,
]


async def run_state_case(h: StateHarness, case: StateCase, junk: Any) -> None:
    before = await snapshot(h.manager)
    try:
        which, merged, revision = await case(h, junk)
    except SessionStoreError:
        assert await snapshot(h.manager) == before, f"{case.__name__}({junk!r:.80}) wrote"
        return
    except BaseException as exc:  # anything but our own error is a bug
        raise AssertionError(
            f"{case.__name__}({junk!r:.80}) raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    if which == "checked":
        return
    got: SessionState | ScopeState
    if which == "session":
        got = await h.manager.get_state(h.key)
    else:
        got = await h.manager.get_scope_state("app", h.scope_id)
    assert got.revision == revision == 2
    assert _text(got.state) == _text(merged), (case.__name__, junk)
