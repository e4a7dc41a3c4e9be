"""Bulk work of a cost report: Python's cyclic garbage collector paused while it runs.

A report of a large ledger allocates an object or more per segment (its record, its priced part)
and keeps them until the report is printed; none of them is part of a reference cycle. With the
collector on, each few hundred allocations start a collection that walks the young objects, and the
older generations are walked again and again as the report grows: about a third of the report's
time on a ledger of 100,000 segments, for no garbage. Paused, memory is freed by reference counting
as always; what the collector would have found is collected when it resumes.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, and as it was after it (nested: a no-op)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def without_collector(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with the collector paused (:func:`collector_paused`)."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return fn(*args, **kwargs)

    return run
