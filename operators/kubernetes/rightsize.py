"""Right-size on Kubernetes: what a GPUJob's runs measured per GPU type, kept in its status (pure).

Each job's state keeps the throughput measured per GPU type (``JobState.measurements``, status key
:data:`STATUS_KEY`: :mod:`orchestrator.state.progress_state`), recorded by the one host from the
newest progress record as on every backend.

Memory and utilization come from the monitors' ``status.gpuUsage`` of a job that ran on one GPU type
only (as locally). Runs of other GPUJobs of the namespace with the same ``name`` and ``team`` (a
profiling run, yesterday's run on another type) count too, as the local controller counts earlier jobs.
The right-size policy and its use are the engine's (``RightSize`` action, ``policies.right_size``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.controller.measurements import MIN_MEASURED_S
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import JobSpec
from orchestrator.state.job_state import JobState

STATUS_KEY = "gpuMeasurements"


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
