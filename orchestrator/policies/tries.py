"""The cost of a try: where a zone's spot is seen only by launching there (Kubernetes), a launch
that finds no capacity costs ``try_cost_h`` (the shortage timeout, ``spotShortageAfterSeconds``)
of slack before the job can be placed again. A policy tries spot only while a failed try still
leaves the job at or above the deadline safety net (``MarketBatch.try_safety_h``); so the slack
pays for at most :func:`affordable_tries` failed tries in a row before on-demand.
"""

from __future__ import annotations

import math

import numpy as np

from orchestrator.policies.context import BoolArray, MarketBatch


def affordable_tries(slack_h: float, safety_h: float, try_cost_h: float) -> int | float:
    """How many spot tries in a row may fail, each costing ``try_cost_h`` of slack, before the slack
    is down to the safety net: every try is made with a failed one's cost in hand. Infinite when a
    try costs nothing (capacity is seen before launching)."""
    if try_cost_h <= 0.0:
        return math.inf
    room = slack_h - safety_h
    return max(math.floor(room / try_cost_h + 1e-9), 0)


def may_try(b: MarketBatch) -> BoolArray:
    """Rows whose slack covers a failed try of spot and the safety net after it."""
    ok: BoolArray = np.asarray(b.slack_h >= b.try_safety_h - 1e-9)
    return ok
