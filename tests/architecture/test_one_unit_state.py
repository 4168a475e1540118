"""Issue 28, session and scoped state: every public state call of the manager opens exactly
one unit of work (a read: one statement; an update: one write transaction), warmed or not
(the state calls keep no cache)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.manager.state import StateCalls

from .conftest import CheckoutCounter

KEY = "agent:main:one-unit-state"
Call = Callable[[SessionManager], Awaitable[Any]]

# name -> (call, units of work)
MANAGER: dict[str, tuple[Call, int]] = {
    "get_state": (lambda m: m.get_state(KEY), 1),
    "update_state": (lambda m: m.update_state(KEY, {"a": 1}, remove=["b"]), 1),
    "update_state (compare-and-set)": (lambda m: m.update_state(KEY, {"a": 2}, 1), 1),
    "get_scope_state": (lambda m: m.get_scope_state("user", "u1"), 1),
    "update_scope_state": (lambda m: m.update_scope_state("app", "a1", {"n": 1}), 1),
    "update_scope_state (compare-and-set)": (
        lambda m: m.update_scope_state("app", "a1", {"n": 2}, expected_revision=1),
        1,
    ),
}


def test_every_state_call_has_a_case() -> None:
    public = {
        name
        for name, _ in inspect.getmembers(StateCalls, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert {case.split(" (")[0] for case in MANAGER} == public


@pytest.mark.parametrize("case", list(MANAGER))
async def test_a_state_call_opens_one_unit_of_work(
    case: str, manager: SessionManager, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    await manager.create(KEY)
    await manager.update_state(KEY, {"b": 0})
    await manager.update_scope_state("app", "a1", {"n": 0})
    call, units = MANAGER[case]
    with checkouts.counting():
        await call(manager)
    assert checkouts.count == units
