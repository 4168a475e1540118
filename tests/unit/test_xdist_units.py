"""The suite's own xdist work units (tests/conftest.py): the modules that must share one
worker are named by module, because xdist's ``xdist_group`` groups nothing under pytest 9."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ONE_WORKER_MODULES, POOLED_GROUP, PoolGroupScheduling

ROOT = Path(__file__).resolve().parents[2]


def _scheduler() -> PoolGroupScheduling:
    # _split_scope reads nothing of the scheduler's state.
    return PoolGroupScheduling.__new__(PoolGroupScheduling)


def test_every_listed_module_exists() -> None:
    missing = [module for module in ONE_WORKER_MODULES if not (ROOT / module).is_file()]
    assert missing == []


def test_a_listed_module_is_one_unit_and_any_other_test_its_own() -> None:
    scheduler = _scheduler()
    wheel = "tests/distribution/test_wheel.py"
    assert scheduler._split_scope(f"{wheel}::test_a") == scheduler._split_scope(f"{wheel}::test_b")
    assert scheduler._split_scope(f"{wheel}::test_a") == "distribution"
    pooled = [module for module, group in ONE_WORKER_MODULES.items() if group == POOLED_GROUP]
    assert len(pooled) >= 2
    assert {scheduler._split_scope(f"{module}::t") for module in pooled} == {POOLED_GROUP}
    other = "tests/unit/test_keys.py::test_something[1]"
    assert scheduler._split_scope(other) == other
