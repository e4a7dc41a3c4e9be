"""A job's state, one typed model for every backend.

The controller engine (:mod:`orchestrator.controller.engine`) turns reconcile's actions into a new
:class:`JobState`; only where it is kept differs: rows of the SQLite store for the local and SLURM
controllers (:func:`orchestrator.state.state_rows.load_state` and ``save_state``), the GPUJob's
``.status`` on Kubernetes (:meth:`JobState.to_status` / :meth:`JobState.from_status`, camelCase as
Kubernetes fields are). The CRD's status schema is generated from this model, never written twice.

On Kubernetes the job's status is kept under ``state`` (printer columns, ``gpuctl status`` and the
metrics read it there), the placement with its snake_case keys, and each segment flat
(:class:`SegmentStatus`: ``start``, ``end``, ``endReason``, ``gpuType``, ... as operators have always
written them), so existing GPUJobs load and their readers keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orchestrator.spec.market import MarketKind
from orchestrator.state.placement import Placement, flat_placement
from orchestrator.state.progress_state import GpuThroughput, ProgressState, advanced
from orchestrator.state.records import segment_cost_usd, segment_hours
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import WaitReason, WatchState


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class NodeLaunch(StrEnum):
    INTENT = "intent"
    """Recorded, not yet handed to the backend: the next tick launches it (launch is idempotent)."""
    LAUNCHED = "launched"
    ENDED = "ended"
    """The controller is done with it: whatever still runs of it is stopped, never relaunched."""


def node_id(job_id: str, attempt: int, index: int) -> str:
    """The id of node ``index`` of the job's ``attempt`` (its pod, process or SLURM task)."""
    return f"{job_id}-a{attempt}-n{index}"


def node_index(node_id: str) -> int:
    """The index of a node in its attempt (the inverse of :func:`node_id`)."""
    return int(node_id.rsplit("-n", 1)[1])


class NodeState(_Model):
    node_id: str
    launch: NodeLaunch = NodeLaunch.INTENT
    notice_at: datetime | None = None
    """When the market's preemption notice reached it (None: never)."""


class SegmentState(_Model):
    """A span on one set of nodes of one placement: what the ledger prices."""

    attempt: int
    placement: Placement
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
    on-demand price as the price paid (no savings claimed), a missing market as on-demand (no spot
    claimed either), missing placement names as ""."""

    start: datetime
    end: datetime | None = None
    end_reason: str | None = None
    attempt: int = 0
    nodes: int = 0
    gpu_type: str = ""
    market: MarketKind = MarketKind.ON_DEMAND
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
        return cls(
            start=segment.started_at,
            end=segment.ended_at,
            end_reason=segment.end_reason,
            attempt=segment.attempt,
            nodes=segment.nodes,
            **asdict(segment.placement),
        )

    def segment(self) -> SegmentState:
        od = self.on_demand_node_price_usd_per_hour
        placement = flat_placement(
            self, on_demand_node_price_usd_per_hour=self.node_price_usd_per_hour if od is None else od
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


class ZoneMemory(_Model):
    """The spot market a job has seen of its zones, kept with its state (every store the same way).

    The availability history the market policy reads (the fields of
    :class:`orchestrator.policies.ZoneHistory`), when it was last updated (``at``), and the zones
    where spot was learned short by trying it (zone -> when, on Kubernetes: pods unschedulable past
    the limit, or nodes reclaimed). Hours and runs are never negative."""

    at: datetime | None = None
    observed_h: float = Field(default=0.0, ge=0)
    any_available_h: float = Field(default=0.0, ge=0)
    available_h: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    up_runs: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    streak_h: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    last_available: dict[str, bool] = Field(default_factory=dict)
    # the spread of the ended runs (absent from states kept before it was: none seen)
    ended_runs: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    ended_run_h: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    ended_run_h2: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    spot_short_seen: dict[str, datetime] = Field(default_factory=dict)


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
    placement: Placement | None = None
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
    zone_history: ZoneMemory | None = None
    """The spot market seen of the job's zones (None: not looked at yet)."""
    deadline: datetime | None = None
    """The job's deadline, resolved once (at admission; on Kubernetes at the GPUJob's first pass)."""
    progress: ProgressState | None = Field(
        default=None,
        description="the newest training progress the job's runtime wrote (as `gpuctl status`)",
    )
    """The newest training progress seen (None: none yet)."""
    measurements: GpuThroughput | None = Field(
        default=None, validation_alias="gpuMeasurements", serialization_alias="gpuMeasurements"
    )
    """Training throughput measured per GPU type (right-size reads it); ``gpuMeasurements`` in a
    GPUJob's status."""

    @property
    def open_segment(self) -> SegmentState | None:
        last = self.segments[-1] if self.segments else None
        return last if last is not None and last.ended_at is None else None

    def node_ids(self, launch: NodeLaunch | None = None) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.attempt_nodes if launch is None or n.launch is launch)

    def cost_usd(self, now: datetime) -> float:
        return sum(s.cost_usd(now) for s in self.segments)

    def with_progress(self, progress: ProgressState | None) -> JobState:
        """The state with ``progress`` seen (None: nothing new): kept as the newest, and measured on
        the open segment of the current attempt."""
        if progress is None or progress == self.progress:
            return self
        segment = self.open_segment
        span = (
            (segment.placement, segment.nodes, segment.started_at)
            if segment is not None and segment.attempt == self.attempt
            else None
        )
        measured = advanced(self.measurements, progress, self.attempt, span)
        return self.model_copy(update={"progress": progress, "measurements": measured})

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
