"""The market policy interface, shared by every policy module."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from orchestrator.policies.context import (
    Action,
    BoolArray,
    IntArray,
    MarketBatch,
    MarketContext,
    MarketDecision,
)


class MarketPolicy(ABC):
    """One decision rule. ``name`` is what ``gpuctl simulate --policy`` and job specs call it."""

    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        """Action codes (B,) and zone indexes (B,), -1 where no zone applies."""

    def decide(self, ctx: MarketContext) -> MarketDecision:
        action, zone = self.decide_batch(ctx.to_batch())
        act = Action(int(action[0]))
        z = int(zone[0])
        return MarketDecision(
            market=act.market,
            zone=ctx.zones[z] if act is Action.SPOT and z >= 0 else None,
            policy=self.name,
        )


_WAIT, _SPOT, _ON_DEMAND = int(Action.WAIT), int(Action.SPOT), int(Action.ON_DEMAND)  # plain ints


def choose_actions(n: int, od: BoolArray, spot: BoolArray, zone: IntArray) -> tuple[IntArray, IntArray]:
    action = np.full(n, _WAIT, dtype=np.int64)
    action[spot] = _SPOT
    action[od] = _ON_DEMAND
    return action, np.where(action == _SPOT, zone, -1).astype(np.int64)
