"""Plain records stored by the job store; what reports and the ledger read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from orchestrator.state.status import FailureReason, JobStatus


def segment_hours(started_at: datetime, ended_at: datetime | None, now: datetime) -> float:
    """Hours a segment held its nodes (an open one: until ``now``)."""
    return max(0.0, ((ended_at or now) - started_at).total_seconds() / 3600.0)


def segment_cost_usd(hours: float, nodes: int, node_price_usd_per_hour: float) -> float:
    """The one cost formula of the ledger: node-hours times the price per node-hour."""
    return hours * nodes * node_price_usd_per_hour


@dataclass(frozen=True)
class JobRecord:
    id: str
    name: str
    user: str
    team: str
    backend: str
    status: JobStatus
    failure_reason: FailureReason | None
    message: str
    spec_json: str
    submitted_at: datetime
    deadline: datetime | None
    updated_at: datetime
    attempts: int
    preemptions: int
    restarts: int
    """Crashes retried (preemptions are not counted here)."""
    cluster: str = ""
    """The Kubernetes cluster the job ran on ("" elsewhere)."""
    namespace: str = ""
    """Its Kubernetes namespace ("" elsewhere)."""


class SegmentRecord(NamedTuple):
    """A span of time on one set of nodes of one type, market and zone: what the ledger prices.

    ``ended_at`` is ``None`` while the segment is open. Prices are per node-hour. A named tuple (not
    a dataclass): a cost report reads one per segment of the ledger, and a tuple is made from a
    database row in a third of a dataclass's time. Change one with ``_replace``.
    """

    id: int
    job_id: str
    attempt: int
    gpu_type: str
    instance_type: str
    market: str
    cloud: str
    region: str
    zone: str
    nodes: int
    gpus_per_node: int
    started_at: datetime
    ended_at: datetime | None
    node_price_usd_per_hour: float
    on_demand_node_price_usd_per_hour: float
    price_source: str
    end_reason: str | None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def hours(self, now: datetime) -> float:
        return segment_hours(self.started_at, self.ended_at, now)

    def cost_usd(self, now: datetime) -> float:
        return segment_cost_usd(self.hours(now), self.nodes, self.node_price_usd_per_hour)

    def on_demand_equivalent_usd(self, now: datetime) -> float:
        return segment_cost_usd(self.hours(now), self.nodes, self.on_demand_node_price_usd_per_hour)


@dataclass(frozen=True)
class EventRecord:
    id: int
    job_id: str
    time: datetime
    kind: str
    """``transition``, ``launch``, ``preemption_notice``, ``node_lost``, ``rescale``, ``segment``, ..."""
    message: str
    status: JobStatus | None
