"""Right-size on Kubernetes: what a GPUJob's runs measured per GPU type, kept in its status (pure).

The local and SLURM controllers measure throughput from a job's progress file inside each ledger
segment (:mod:`orchestrator.controller.measurements`). A GPUJob has only its newest progress record
(``status.progress``), so each pass adds the step between the record seen last pass and the newest one
to the GPU type of the segment both fall in (a span crossing a segment boundary, a new attempt, or a
rescale is left out, as the local controller leaves out waiting and starting). Status key
:data:`STATUS_KEY`::

    gpuMeasurements:
      byGpuType: {H100: {steps: 120, gpuSeconds: 960.0, seconds: 60.0}}
      last: {step: 130, time: "2026-...Z", attempt: 2}

Memory and utilization come from the monitors' ``status.gpuUsage`` of a job that ran on one GPU type
only (as locally). Runs of other GPUJobs of the namespace with the same ``name`` and ``team`` (a
profiling run, yesterday's run on another type) count too, as the local controller counts earlier jobs.
The right-size policy and its use are the engine's (``RightSize`` action, ``policies.right_size``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from orchestrator.controller.measurements import MIN_MEASURED_S
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import JobSpec
from orchestrator.state.job_state import JobState

STATUS_KEY = "gpuMeasurements"


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def with_throughput(status: Mapping[str, Any], state: JobState) -> dict[str, Any]:
    """``status`` with :data:`STATUS_KEY` advanced by the newest progress record (``status.progress``)."""
    progress = status.get("progress") or {}
    now_time, step = _time(progress.get("time")), progress.get("step")
    if now_time is None or not isinstance(step, int) or state.attempt == 0:
        return dict(status)
    saved = dict(status.get(STATUS_KEY) or {})
    by_type = {k: dict(v) for k, v in (saved.get("byGpuType") or {}).items()}
    last = saved.get("last") or {}
    last_time = _time(last.get("time"))
    if last_time is not None and now_time <= last_time:
        return dict(status)  # nothing newer
    segment = state.open_segment
    same_span = (
        segment is not None
        and last_time is not None
        and last.get("attempt") == state.attempt
        and segment.attempt == state.attempt
        and segment.started_at <= last_time
        and isinstance(last.get("step"), int)
        and step > last["step"]
    )
    if same_span and segment is not None and last_time is not None:
        seconds = (now_time - last_time).total_seconds()
        gpus = segment.nodes * segment.placement.gpus_per_node
        entry = by_type.setdefault(
            segment.placement.gpu_type, {"steps": 0, "gpuSeconds": 0.0, "seconds": 0.0}
        )
        entry["steps"] = int(entry["steps"]) + step - int(last["step"])
        entry["gpuSeconds"] = round(float(entry["gpuSeconds"]) + seconds * gpus, 6)
        entry["seconds"] = round(float(entry["seconds"]) + seconds, 6)
    point = {"step": step, "time": progress["time"], "attempt": state.attempt}
    return {**status, STATUS_KEY: {"byGpuType": by_type, "last": point}}


def same_job(spec: JobSpec, other: Mapping[str, Any]) -> bool:
    """Whether GPUJob ``other`` is a run of the same job: the same ``name`` and ``team``."""
    other_spec = other.get("spec") or {}
    name = other_spec.get("name") or (other.get("metadata") or {}).get("name")
    return bool(name == spec.name and (other_spec.get("team") or "default") == spec.team)


def measurements(statuses: Iterable[Mapping[str, Any]]) -> tuple[GpuMeasurement, ...]:
    """Per GPU type, what the runs with these statuses measured (types measured too briefly left out)."""
    steps: dict[str, float] = defaultdict(float)
    gpu_seconds: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    peak: dict[str, float] = {}
    util: dict[str, list[float]] = defaultdict(list)
    for status in statuses:
        for gpu, entry in ((status.get(STATUS_KEY) or {}).get("byGpuType") or {}).items():
            steps[gpu] += float(entry.get("steps") or 0)
            gpu_seconds[gpu] += float(entry.get("gpuSeconds") or 0.0)
            seconds[gpu] += float(entry.get("seconds") or 0.0)
        types = {s.get("gpuType") for s in status.get("segments") or ()}
        usage = status.get("gpuUsage") or {}
        if len(types) == 1 and usage:  # the monitors' numbers belong to one GPU type only
            (gpu,) = types
            if usage.get("mem_peak_bytes") is not None:
                peak[str(gpu)] = max(peak.get(str(gpu), 0.0), float(usage["mem_peak_bytes"]) / 2**30)
            if usage.get("util_mean_pct") is not None:
                util[str(gpu)].append(float(usage["util_mean_pct"]) / 100.0)
    return tuple(
        GpuMeasurement(
            gpu_type=gpu,
            units_per_second_per_gpu=steps[gpu] / gpu_seconds[gpu],
            peak_memory_gib=peak.get(gpu),
            utilization=sum(util[gpu]) / len(util[gpu]) if util[gpu] else None,
        )
        for gpu in sorted(steps)
        if seconds[gpu] >= MIN_MEASURED_S and gpu_seconds[gpu] > 0 and steps[gpu] > 0
    )


def sized_spec(spec: JobSpec, state: JobState) -> JobSpec:
    """``spec`` limited to the GPU type right-size placed the job on (``auto``), else unchanged: the
    candidates and the pods' required GPU products are that type's."""
    pick = state.right_size
    if pick is None or not pick.apply or pick.gpu_type not in spec.resources.gpu_types:
        return spec
    resources = spec.resources.model_copy(update={"gpu_types": [pick.gpu_type]})
    return spec.model_copy(update={"resources": resources})
