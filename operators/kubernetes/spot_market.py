"""Spot shortage on Kubernetes, and the operator's view of the market (pure: no API calls).

Kubernetes does not say how much spot capacity a zone has. What it shows is pods that cannot be
placed: a pod the scheduler finds no node for is ``PodScheduled=False`` with reason ``Unschedulable``,
and stays so while the node provisioner (Karpenter, a cluster autoscaler) cannot get an instance
(Karpenter's "insufficient capacity"). Such pods hold no node: they are observed ``queued`` and cost
nothing. When every pod of a spot attempt has been unschedulable for longer than
``KubeConfig.spot_shortage_after_s``, the attempt's zone is short of spot:

* the zone is offered with no capacity in the :class:`MarketView` reconcile reads, for
  ``retry_after_s`` after its pods were last seen so (then spot is tried there again). A spot node the
  market takes back (its pod disrupted, evicted or exited as preempted) marks its zone so too when the
  job has other spot zones: the capacity is gone there now, as a trace would say, so the policy
  weighs the other zones and on-demand instead of queueing where capacity just went. A one-zone job
  is placed there again as before (queued pods are a free way to wait for that zone, and the policy
  is asked again once they stay unschedulable);
* the market policy is asked, as on every backend: when it would place the job elsewhere (on-demand,
  another zone) the pods are observed PREEMPTED (queued: their segment is free), so reconcile's
  recovery path places it there; when it would wait, the pods wait in the queue, where nothing is
  billed and they start as soon as capacity appears.

The zones' availability history the policy reads and the zones seen short are the job state's
``zone_history`` (:class:`~orchestrator.state.job_state.ZoneMemory`, ``status.zoneHistory``), kept by
every backend's store the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from orchestrator.backends.base import NodePhase, Placement
from orchestrator.backends.kubernetes.observe import pod_phase, unschedulable_since
from orchestrator.controller import host
from orchestrator.controller.market_choice import (
    JobClock,
    MarketChoice,
    MarketView,
    ZoneMarket,
    choose_market,
)
from orchestrator.controller.placement import Candidates
from orchestrator.spec import JobSpec
from orchestrator.state.job_state import JobState, ZoneMemory

TIMER_S = 10.0
"""The operator's interval between passes of a job (its kopf timer), unless
``GPUCTL_RECONCILE_INTERVAL_S`` says otherwise: the least the market policy's tick may be."""


def short_zones(memory: ZoneMemory, now: datetime, retry_after_s: float) -> set[str]:
    """The zones seen short of spot less than ``retry_after_s`` ago."""
    return {z for z, seen in memory.spot_short_seen.items() if (now - seen).total_seconds() < retry_after_s}


def as_candidates(candidates: Candidates | tuple[Placement | None, Placement | None]) -> Candidates:
    """``(spot, on_demand)`` is one spot zone: the spot placement's."""
    if isinstance(candidates, Candidates):
        return candidates
    spot, on_demand = candidates
    return Candidates({spot.zone: spot} if spot is not None else {}, on_demand)


def short_zone(
    state: JobState,
    pods_by_node: Mapping[str, Mapping[str, Any]],
    active_nodes: Sequence[str],
    now: datetime,
    after_s: float,
) -> str | None:
    """The current spot attempt's zone when every node not ended has a pod that has been unschedulable
    for longer than ``after_s``; else None."""
    placement = state.placement
    if placement is None or not placement.spot or not active_nodes:
        return None
    for node in active_nodes:
        pod = pods_by_node.get(node)
        since = unschedulable_since(pod) if pod is not None else None
        if since is None or (now - since).total_seconds() <= after_s:
            return None
    return placement.zone


def reclaimed_zone(
    state: JobState,
    pods_by_node: Mapping[str, Mapping[str, Any]],
    active_nodes: Sequence[str],
    existing_nodes: set[str] | None,
) -> str | None:
    """The current spot attempt's zone when the market is taking back one of its nodes (a pod seen
    PREEMPTED: disrupted, evicted or exited as preempted, not merely queued); else None."""
    placement = state.placement
    if placement is None or not placement.spot:
        return None
    for node in active_nodes:
        pod = pods_by_node.get(node)
        if pod is not None and pod_phase(pod, existing_nodes).phase is NodePhase.PREEMPTED:
            return placement.zone
    return None


def scheduled_zone(
    state: JobState, pods_by_node: Mapping[str, Mapping[str, Any]], active_nodes: Sequence[str]
) -> str | None:
    """The current spot attempt's zone when one of its pods got a node (so spot capacity is there)."""
    placement = state.placement
    if placement is None or not placement.spot:
        return None
    scheduled = any(
        pods_by_node[n].get("spec", {}).get("nodeName") for n in active_nodes if n in pods_by_node
    )
    return placement.zone if scheduled else None


def remember(
    memory: ZoneMemory | None,
    spec: JobSpec,
    found: Candidates,
    state: JobState,
    short: str | None,
    scheduled: str | None,
    now: datetime,
    retry_after_s: float,
    reclaimed: str | None = None,
    interval_s: float = TIMER_S,
) -> tuple[MarketView, ZoneMemory]:
    """The market view of this pass (a zone short of spot offers no capacity), and the memory updated:
    the zone seen short, reclaimed or scheduled now, the history watched since the last pass (not once
    ended)."""
    memory = memory or ZoneMemory()
    seen = dict(memory.spot_short_seen)
    if scheduled is not None:
        seen.pop(scheduled, None)
    if short is not None:
        seen[short] = now
    if reclaimed is not None and len(found.spot_by_zone) > 1:  # see the module's docstring
        seen[reclaimed] = now
    memory = memory.model_copy(update={"spot_short_seen": seen})
    short_now = short_zones(memory, now, retry_after_s)
    zones = tuple(
        ZoneMarket(zone, spot, 0 if zone in short_now else None) for zone, spot in found.spot_by_zone.items()
    )
    tick_h = host.decision_tick_h(memory, now, interval_s)  # at least the timer's interval
    if not state.status.terminal:
        up = {z.zone: (z.capacity is None or z.capacity >= spec.resources.min_nodes) for z in zones}
        memory, _ = host.watched(memory, up, now)
    history = host.zone_history(memory)
    market = MarketView(zones, found.on_demand, history, tick_h, host.run_hours(state.segments, spec, now))
    return market, memory


def with_capacity(market: MarketView, zone: str, capacity: int | None) -> MarketView:
    """``market`` with ``zone``'s capacity at most ``capacity`` (None: unchanged)."""
    if capacity is None:
        return market
    zones = tuple(
        dataclasses.replace(z, capacity=capacity if z.capacity is None else min(z.capacity, capacity))
        if z.zone == zone
        else z
        for z in market.zones
    )
    return dataclasses.replace(market, zones=zones)


def policy_moves(spec: JobSpec, market: MarketView, clock: JobClock) -> bool:
    """Whether the market policy would place the job now (on-demand or another zone) rather than wait."""
    return isinstance(choose_market(spec, market, clock), MarketChoice)
