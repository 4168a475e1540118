"""Random hostile values for the state calls (issue 28, item 5): the package's own error
with nothing written, or the state stored and read back exactly (``state_cases.py``)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionManager

from .state_cases import SCOPE_STATE_CASES, STATE_CASES, StateCase, prepare_state, run_state_case
from .test_write_methods_property import JUNK

_SETTINGS = settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(case=st.sampled_from(STATE_CASES + SCOPE_STATE_CASES), junk=JUNK)
async def test_state_writes_refuse_hostile_values_or_store_them_exactly(
    manager: SessionManager, case: StateCase, junk: Any
) -> None:
    await run_state_case(await prepare_state(manager), case, junk)
