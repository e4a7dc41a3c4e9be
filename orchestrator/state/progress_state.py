"""The training progress and the right-size measurements a job's state keeps (every store the same way).

:class:`ProgressState` is the newest progress record seen (a GPUJob's ``status.progress``);
:class:`GpuThroughput` the training throughput measured per GPU type (``status.gpuMeasurements``):
each record of progress adds the steps and seconds since the one before to the GPU type of the segment
both fall in (a span crossing a segment boundary, a new attempt or a rescale is left out, as is time
spent waiting or starting)::

    gpuMeasurements:
      byGpuType: {H100: {steps: 120, gpuSeconds: 960.0, seconds: 60.0}}
      last: {step: 130, time: "2026-...Z", attempt: 2}
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orchestrator.state.placement import Placement


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ProgressState(_Model):
    """The newest training progress record (the fields of :class:`orchestrator.backends.base.Progress`)."""

    step: int
    total_steps: int | None = None
    loss: float | None = None
    world_size: int | None = None
    finished: bool = Field(default=False, description="training wrote its final record")
    metrics: dict[str, float] | None = Field(
        default=None, description="final metrics the training script reported"
    )
    time: datetime | None = Field(default=None, description="by the trainer's clock")


class ThroughputSum(_Model):
    """Training measured on one GPU type."""

    steps: int = Field(default=0, ge=0, description="training steps measured")
    gpu_seconds: float = Field(default=0.0, ge=0, description="GPU-seconds those steps took")
    seconds: float = Field(default=0.0, ge=0, description="seconds of training measured")


class ThroughputMark(_Model):
    """The progress record the next measurement starts from."""

    step: int
    time: datetime
    attempt: int


class GpuThroughput(_Model):
    """Training throughput measured per GPU type (what right-size reads)."""

    by_gpu_type: dict[str, ThroughputSum] = Field(default_factory=dict)
    last: ThroughputMark | None = None


def advanced(
    throughput: GpuThroughput | None,
    progress: ProgressState | None,
    attempt: int,
    segment: tuple[Placement, int, datetime] | None,
) -> GpuThroughput | None:
    """``throughput`` with ``progress`` measured, on the open ``segment`` (placement, nodes, start) of
    ``attempt``; unchanged when ``progress`` is no newer than the last record measured (idempotent)."""
    if progress is None or progress.time is None or attempt == 0:
        return throughput
    last = throughput.last if throughput else None
    if last is not None and progress.time <= last.time:
        return throughput
    by_type = dict(throughput.by_gpu_type) if throughput else {}
    if segment is not None and last is not None and last.attempt == attempt and progress.step > last.step:
        placement, nodes, started_at = segment
        if started_at <= last.time:
            seconds = (progress.time - last.time).total_seconds()
            was = by_type.get(placement.gpu_type, ThroughputSum())
            by_type[placement.gpu_type] = ThroughputSum(
                steps=was.steps + progress.step - last.step,
                gpu_seconds=round(was.gpu_seconds + seconds * nodes * placement.gpus_per_node, 6),
                seconds=round(was.seconds + seconds, 6),
            )
    mark = ThroughputMark(step=progress.step, time=progress.time, attempt=attempt)
    return GpuThroughput(by_gpu_type=by_type, last=mark)
