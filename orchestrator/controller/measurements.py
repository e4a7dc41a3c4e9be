"""What a job's earlier runs measured, per GPU type: the right-size policy's input.

Throughput is optimizer steps per second per GPU, read from the progress files of this job and of
earlier jobs with the same name and team (a profiling run, yesterday's run on another GPU type),
inside each ledger segment (so time spent waiting or starting is not counted). Steps are comparable
across node counts because elastic jobs keep the global batch. Memory and utilization come from the
GPU monitor's stored summaries when there are any; otherwise they are left unmeasured (``None``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime

from orchestrator.backends.progress import read_step_times
from orchestrator.policies import GpuMeasurement
from orchestrator.state.job_dir import JobDir
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore

MIN_MEASURED_S = 10.0
"""Segments shorter than this (of steady progress) say too little to size a job."""

UsageReader = Callable[[str], tuple[float | None, float | None]]
"""job id -> (peak memory GiB per GPU, mean utilization 0-1), each None when not measured."""


def segment_throughput(
    segments: Sequence[SegmentRecord], points: Sequence[tuple[datetime, int]], now: datetime
) -> dict[str, tuple[float, float]]:
    """gpu_type -> (steps per second per GPU, seconds of progress measured on it)."""
    work: dict[str, float] = defaultdict(float)  # GPU-seconds per step, summed as steps x gpus
    seconds: dict[str, float] = defaultdict(float)
    steps_done: dict[str, float] = defaultdict(float)
    for seg in segments:
        end = seg.ended_at or now
        inside = [(t, s) for t, s in points if seg.started_at <= t <= end]
        if len(inside) < 2:
            continue
        span = (inside[-1][0] - inside[0][0]).total_seconds()
        steps = inside[-1][1] - inside[0][1]
        if span <= 0 or steps <= 0:
            continue
        seconds[seg.gpu_type] += span
        steps_done[seg.gpu_type] += steps
        work[seg.gpu_type] += span * seg.gpus
    return {
        gpu: (steps_done[gpu] / work[gpu], seconds[gpu]) for gpu in work if seconds[gpu] >= MIN_MEASURED_S
    }


def monitor_usage(store: JobStore) -> UsageReader:
    """Peak memory (GiB per GPU) and mean utilization from the job's stored monitor windows."""
    usage_store = UsageStore(store)

    def read(job_id: str) -> tuple[float | None, float | None]:
        usage = usage_store.usage(job_id)
        if usage is None:
            return None, None
        return usage.mem_peak_bytes / 2**30, usage.util_mean_pct / 100.0

    return read


def gpu_measurements(
    store: JobStore,
    job: JobRecord,
    now: datetime,
    usage: UsageReader | None = None,
    jobs: Sequence[JobRecord] | None = None,
) -> tuple[GpuMeasurement, ...]:
    """Per GPU type, what runs of this job (same name and team) measured; types never run are absent
    (``jobs``: the runs to look at, when the caller already listed them; default every stored job)."""
    rate_sum: dict[str, float] = defaultdict(float)
    weight: dict[str, float] = defaultdict(float)
    peak: dict[str, float] = {}
    util: dict[str, list[float]] = defaultdict(list)
    for other in store.list_jobs() if jobs is None else jobs:
        if other.name != job.name or other.team != job.team:
            continue
        segments = store.segments(other.id)
        points = read_step_times(JobDir(store.job_dir(other.id)).progress)
        measured = segment_throughput(segments, points, now)
        for gpu, (rate, secs) in measured.items():
            rate_sum[gpu] += rate * secs
            weight[gpu] += secs
        types = {s.gpu_type for s in segments}
        if usage is not None and len(types) == 1:  # the monitor's numbers belong to one GPU type only
            memory, utilization = usage(other.id)
            (gpu,) = types
            if memory is not None:
                peak[gpu] = max(peak.get(gpu, 0.0), memory)
            if utilization is not None:
                util[gpu].append(utilization)
    return tuple(
        GpuMeasurement(
            gpu_type=gpu,
            units_per_second_per_gpu=rate_sum[gpu] / weight[gpu],
            peak_memory_gib=peak.get(gpu),
            utilization=sum(util[gpu]) / len(util[gpu]) if util[gpu] else None,
        )
        for gpu in sorted(weight)
    )
