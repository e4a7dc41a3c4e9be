"""A job's state, one typed model for every backend.

The controller engine (:mod:`orchestrator.controller.engine`) turns reconcile's actions into a new
:class:`JobState`; only where it is kept differs: rows of the SQLite store for the local and SLURM
controllers (:meth:`orchestrator.state.store.JobStore.load_state` / ``StoreWrites.save_state``), the
GPUJob's ``.status`` on Kubernetes (:meth:`JobState.to_status` / :meth:`JobState.from_status`, camelCase
as Kubernetes fields are). The CRD's status schema is generated from this model, never written twice.

On Kubernetes the job's status is kept under ``state`` (printer columns, ``gpuctl status`` and the
metrics read it there), the placement with its snake_case keys, and each segment flat
(:class:`SegmentStatus`: ``start``, ``end``, ``endReason``, ``gpuType``, ... as operators have always
written them), so existing GPUJobs load and their readers keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orchestrator.state.records import segment_cost_usd, segment_hours
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import WaitReason, WatchState


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PlacementState(BaseModel):
    """Where an attempt runs: one GPU type, market, zone and price (mirrors the backends' Placement).

    Its keys stay snake_case in a GPUJob's status too (as the operator has always written them)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

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


class SegmentStatus(_Model):
    """A segment as a GPUJob's status keeps it: flat, as every operator version wrote it.

    Segments written before a field existed lack it: a missing ``attempt`` reads as 0, a missing
    on-demand price as the price paid (no savings claimed), missing placement names as ""."""

    start: datetime
    end: datetime | None = None
    end_reason: str | None = None
    attempt: int = 0
    nodes: int = 0
    gpu_type: str = ""
    market: str = ""
    cloud: str = ""
    region: str = ""
    zone: str = ""
    instance_type: str = ""
    gpus_per_node: int = 0
    node_price_usd_per_hour: float = 0.0
    on_demand_node_price_usd_per_hour: float | None = None
    price_source: str = ""

    @classmethod
    def of(cls, segment: SegmentState) -> SegmentStatus:
        p = segment.placement
        return cls(
            start=segment.started_at,
            end=segment.ended_at,
            end_reason=segment.end_reason,
            attempt=segment.attempt,
            nodes=segment.nodes,
            gpu_type=p.gpu_type,
            market=p.market,
            cloud=p.cloud,
            region=p.region,
            zone=p.zone,
            instance_type=p.instance_type,
            gpus_per_node=p.gpus_per_node,
            node_price_usd_per_hour=p.node_price_usd_per_hour,
            on_demand_node_price_usd_per_hour=p.on_demand_node_price_usd_per_hour,
            price_source=p.price_source,
        )

    def segment(self) -> SegmentState:
        od = self.on_demand_node_price_usd_per_hour
        placement = PlacementState(
            gpu_type=self.gpu_type,
            market=self.market,
            cloud=self.cloud,
            region=self.region,
            zone=self.zone,
            instance_type=self.instance_type,
            gpus_per_node=self.gpus_per_node,
            node_price_usd_per_hour=self.node_price_usd_per_hour,
            on_demand_node_price_usd_per_hour=self.node_price_usd_per_hour if od is None else od,
            price_source=self.price_source,
        )
        return SegmentState(
            attempt=self.attempt,
            placement=placement,
            nodes=self.nodes,
            started_at=self.start,
            ended_at=self.end,
            end_reason=self.end_reason,
        )


@dataclass(frozen=True)
class JobEvent:
    """Something the engine did, for the job's event history (``gpuctl events``)."""

    kind: str
    message: str
    status: JobStatus | None = None
    """The status entered, for ``transition`` events."""
    evidence: Mapping[str, Any] | None = None
    """Numbers behind the event (notifications carry them; the event history keeps the message)."""


class RightSizePick(_Model):
    gpu_type: str
    apply: bool


class JobState(_Model):
    """Everything the engine changes about a job. Immutable: the engine returns a new one."""

    status: JobStatus = Field(
        default=JobStatus.PENDING, validation_alias="state", serialization_alias="state"
    )
    """Kept under ``state`` in a GPUJob's status (printer columns, ``gpuctl status`` and metrics read it)."""
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
    budget_alerts: tuple[int, ...] = ()
    """The shares of ``goals.budget_usd`` (percent: 50, 80, 100) already announced, each once."""
    watch: WatchState = WatchState()
    """Recent step advances and the alerts already raised (stall, idle, deadline and budget at risk)."""
    waiting: WaitReason | None = None
    """Why the job waits, while it is neither running nor ended."""

    @property
    def open_segment(self) -> SegmentState | None:
        last = self.segments[-1] if self.segments else None
        return last if last is not None and last.ended_at is None else None

    def node_ids(self, launch: NodeLaunch | None = None) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.attempt_nodes if launch is None or n.launch is launch)

    def cost_usd(self, now: datetime) -> float:
        return sum(s.cost_usd(now) for s in self.segments)

    def to_status(self) -> dict[str, Any]:
        """The state as a GPUJob's ``.status`` fields (camelCase, JSON; unset fields left out, flat
        segments)."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["segments"] = [
            SegmentStatus.of(s).model_dump(mode="json", by_alias=True, exclude_none=True)
            for s in self.segments
        ]
        return data

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> JobState:
        """The state kept in a GPUJob's ``.status`` (display fields beside it are ignored)."""
        data = {k: v for k, v in status.items() if v is not None and k in _STATUS_KEYS}
        data["segments"] = [
            SegmentStatus.model_validate(s).segment() if "start" in s else SegmentState.model_validate(s)
            for s in status.get("segments") or ()
        ]
        return cls.model_validate(data)

    @classmethod
    def status_schema(cls) -> dict[str, Any]:
        """JSON Schema of :meth:`to_status` (for the CRD's status)."""
        schema: dict[str, Any] = cls.model_json_schema(by_alias=True, mode="serialization")
        segment: dict[str, Any] = SegmentStatus.model_json_schema(by_alias=True, mode="serialization")
        defs = {**schema.get("$defs", {}), **segment.pop("$defs", {}), "SegmentStatus": segment}
        defs.pop("SegmentState", None)
        schema["$defs"] = defs
        schema["properties"]["segments"] = {
            "type": "array",
            "items": {"$ref": "#/$defs/SegmentStatus"},
            "description": "spans on one set of nodes of one placement: what the ledger prices",
        }
        return schema


STATUS_KEYS = frozenset(f.serialization_alias or name for name, f in JobState.model_fields.items())
"""The keys of a GPUJob's ``.status`` that hold the job's state (the others are display fields)."""
_STATUS_KEYS = STATUS_KEYS | set(JobState.model_fields)
