"""A job's measured GPU needs in the right-size policy's terms (:class:`GpuMeasurement`).

Memory and utilization come from the stored monitor windows (:mod:`orchestrator.state.usage`), over
all of the job's windows; throughput from the progress file: steps per second over the newest
segment's progress lines, times the work units per step (``policies.global_batch``, else 1: then a
"unit" is an optimizer step), divided by the segment's GPUs. The GPU type is the newest segment's.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from orchestrator.policies.rightsize import GpuMeasurement
from orchestrator.spec import spec_from_json
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore


def steps_per_second(progress_file: Path, since: datetime | None = None) -> float | None:
    """The step rate between the first and the last step line at or after ``since`` (None: too few)."""
    points: list[tuple[datetime, int]] = []
    try:
        lines = progress_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict) or "event" in doc or "step" not in doc or not doc.get("time"):
            continue
        moment = datetime.fromisoformat(str(doc["time"]))
        if since is None or moment >= since:
            points.append((moment, int(doc["step"])))
    if len(points) < 2:
        return None
    (t0, s0), (t1, s1) = points[0], points[-1]
    seconds = (t1 - t0).total_seconds()
    return (s1 - s0) / seconds if seconds > 0 and s1 > s0 else None


def measured_gpu(
    store: JobStore, job_id: str, units_per_second_per_gpu: float | None = None
) -> GpuMeasurement | None:
    """What was measured for ``job_id``; None until a monitor window is stored and (unless
    ``units_per_second_per_gpu`` is given) two progress lines show a step rate."""
    usage = UsageStore(store).usage(job_id)
    segments = store.segments(job_id)
    if usage is None or not segments:
        return None
    segment = segments[-1]
    if units_per_second_per_gpu is None:
        rate = steps_per_second(store.job_dir(job_id) / "progress.jsonl", segment.started_at)
        if rate is None:
            return None
        units_per_step = spec_from_json(store.job(job_id).spec_json).policies.global_batch or 1
        units_per_second_per_gpu = rate * units_per_step / max(segment.nodes * segment.gpus_per_node, 1)
    return GpuMeasurement(
        gpu_type=segment.gpu_type,
        units_per_second_per_gpu=units_per_second_per_gpu,
        peak_memory_gib=usage.mem_peak_bytes / 2**30,
        utilization=usage.util_mean_pct / 100.0,
    )
