"""A job's state, one typed model for every backend.

The controller engine (:mod:`orchestrator.controller.engine`) turns reconcile's actions into a new
:class:`JobState`; only where it is kept differs: rows of the SQLite store for the local and SLURM
controllers (:meth:`orchestrator.state.store.JobStore.load_state` / ``StoreWrites.save_state``), the
GPUJob's ``.status`` on Kubernetes (:meth:`JobState.to_status` / :meth:`JobState.from_status`, camelCase
as Kubernetes fields are). The CRD's status schema is generated from this model, never written twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from orchestrator.state.status import FailureReason, JobStatus


def segment_hours(started_at: datetime, ended_at: datetime | None, now: datetime) -> float:
    """Hours a segment held its nodes (an open one: until ``now``)."""
    return max(0.0, ((ended_at or now) - started_at).total_seconds() / 3600.0)


def segment_cost_usd(hours: float, nodes: int, node_price_usd_per_hour: float) -> float:
    """The one cost formula of the ledger: node-hours times the price per node-hour."""
    return hours * nodes * node_price_usd_per_hour


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PlacementState(_Model):
    """Where an attempt runs: one GPU type, market, zone and price (mirrors the backends' Placement)."""

    gpu_type: str
    market: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpus_per_node: int
    node_price_usd_per_hour: float
    on_demand_node_price_usd_per_hour: float
    price_source: str


class NodeLaunch(StrEnum):
    INTENT = "intent"
    """Recorded, not yet handed to the backend: the next tick launches it (launch is idempotent)."""
    LAUNCHED = "launched"
    ENDED = "ended"
    """The controller is done with it: whatever still runs of it is stopped, never relaunched."""


class NodeState(_Model):
    node_id: str
    launch: NodeLaunch = NodeLaunch.INTENT
    notice_at: datetime | None = None
    """When the market's preemption notice reached it (None: never)."""


class SegmentState(_Model):
    """A span on one set of nodes of one placement: what the ledger prices."""

    attempt: int
    placement: PlacementState
    nodes: int
    started_at: datetime
    ended_at: datetime | None = None
    end_reason: str | None = None

    def hours(self, now: datetime) -> float:
        return segment_hours(self.started_at, self.ended_at, now)

    def cost_usd(self, now: datetime) -> float:
        return segment_cost_usd(self.hours(now), self.nodes, self.placement.node_price_usd_per_hour)

    def on_demand_equivalent_usd(self, now: datetime) -> float:
        return segment_cost_usd(self.hours(now), self.nodes, self.placement.on_demand_node_price_usd_per_hour)


@dataclass(frozen=True)
class JobEvent:
    """Something the engine did, for the job's event history (``gpuctl events``)."""

    kind: str
    message: str
    status: JobStatus | None = None
    """The status entered, for ``transition`` events."""


class RightSizePick(_Model):
    gpu_type: str
    apply: bool


class JobState(_Model):
    """Everything the engine changes about a job. Immutable: the engine returns a new one."""

    status: JobStatus = JobStatus.PENDING
    failure_reason: FailureReason | None = None
    message: str = ""
    attempt: int = 0
    placement: PlacementState | None = None
    """The current attempt's placement (None before the first)."""
    attempt_nodes: tuple[NodeState, ...] = ()
    """The current attempt's nodes."""
    segments: tuple[SegmentState, ...] = ()
    restarts: int = 0
    preemptions: int = 0
    preempted_in_attempt: bool = False
    """The market reclaimed a node of this attempt (other nodes' failures are then collateral)."""
    rescaled_at: datetime | None = None
    right_size: RightSizePick | None = None

    @property
    def open_segment(self) -> SegmentState | None:
        last = self.segments[-1] if self.segments else None
        return last if last is not None and last.ended_at is None else None

    def node_ids(self, launch: NodeLaunch | None = None) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.attempt_nodes if launch is None or n.launch is launch)

    def cost_usd(self, now: datetime) -> float:
        return sum(s.cost_usd(now) for s in self.segments)

    def to_status(self) -> dict[str, Any]:
        """The state as a GPUJob's ``.status`` fields (camelCase, JSON)."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return data

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> JobState:
        """The state kept in a GPUJob's ``.status`` (display fields beside it are ignored)."""
        return cls.model_validate({k: v for k, v in status.items() if v is not None})

    @classmethod
    def status_schema(cls) -> dict[str, Any]:
        """JSON Schema of :meth:`to_status` (for the CRD's status)."""
        schema: dict[str, Any] = cls.model_json_schema(by_alias=True, mode="serialization")
        return schema
