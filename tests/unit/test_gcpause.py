"""``gc_paused``: the collector is off inside, and afterwards exactly as it was before the
first of any overlapping pauses."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from opensquilla.session.support.gcpause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_pauses_and_resumes_even_on_error() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()


def test_overlapping_pauses_resume_once_the_last_ends() -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_caller_stays_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_pauses_overlapping_across_threads() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with gc_paused():
        thread.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread's pause is still open
    release.set()
    thread.join(5)
    assert gc.isenabled()
