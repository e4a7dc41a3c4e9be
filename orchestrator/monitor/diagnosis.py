"""Diagnosis rules over window summaries and per-step timings. Pure: no I/O except `diagnose_files`.

Thresholds come from sources people trust:
- PyTorch profiler recommendations: data loading over 5 % of step time, GPU utilization under 50 %,
  memory over 90 % of capacity;
- DCGM guidance: SM activity under 0.5 means the GPU is used ineffectively;
- idle GPU time: over 10 % of GPU-seconds with utilization 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.contract import (
    UNAVAILABLE_KIND,
    ProgressRecord,
    monitor_unavailable,
    read_progress_records,
    summary_record,
)
from orchestrator.contract.fields import MAX_SECONDS
from orchestrator.errors import NotFoundError, UserError
from orchestrator.monitor.summary import read_summaries

GIB = 2**30


def pct(fraction: float) -> str:
    """0.38 -> '38 %'."""
    return f"{fraction * 100:.0f} %"


@dataclass(frozen=True)
class Thresholds:
    input_bound_fraction: float = 0.05
    low_util_pct: float = 50.0
    high_memory_fraction: float = 0.90
    low_sm_activity: float = 0.5
    idle_fraction: float = 0.10
    oversized_memory_fraction: float = 0.5
    memory_headroom: float = 1.2  # a smaller GPU must hold peak memory times this
    throttled_fraction: float = 0.2
    skip_first_steps: int = 1  # warm-up steps (compilation, first batch) are not typical


@dataclass(frozen=True)
class GpuCandidate:
    """A GPU type the job could move to; ``relative_price`` per GPU-hour, the current GPU being 1.0."""

    gpu_type: str
    memory_gib: float
    relative_price: float


@dataclass(frozen=True)
class Bound:
    """What a finding costs, as an upper bound with how it was computed.

    ``share``: the largest share of the job's GPU spend the fix could save (0 to 1): the same work in
    ``1 - share`` of the time (``speedup`` = 1 / (1 - share) times the throughput) or at ``1 - share``
    of the price. ``None``: the finding has a cost nobody measured (``basis`` says why)."""

    share: float | None
    basis: str

    @property
    def speedup(self) -> float | None:
        """At most this many times the throughput once fixed (None when not priced or a price bound)."""
        if self.share is None or self.share >= 1.0:
            return None
        return 1.0 / (1.0 - self.share)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # "info", "warning" or "critical"
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    bound: Bound | None = None
    """What the finding costs (None: it costs no throughput, such as memory pressure, a risk)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.bound is not None:
            data["bound"]["speedup"] = self.bound.speedup
        return data


def time_bound(share: float, what: str) -> Bound:
    """A throughput bound: ``share`` of the GPU time buys nothing, so the job runs at most
    1 / (1 - share) times faster once it is fixed, and the same work costs ``share`` less."""
    share = min(max(share, 0.0), 0.99)
    return Bound(
        round(share, 4), f"{what}: at most 1/(1-{share:.2f}) = {1 / (1 - share):.2f}x the throughput"
    )


@dataclass(frozen=True)
class StepTiming:
    data_s: float
    compute_s: float


@dataclass(frozen=True)
class UsageSummary:
    """The windows of a job folded together, GPU-time weighted."""

    seconds: float
    gpus: int
    util_mean_pct: float
    util_p95_pct: float
    mem_max_bytes: int
    mem_total_bytes: int
    idle_seconds: float
    sm_activity_mean: float | None
    throttled_fraction: float


def combine_windows(windows: Sequence[dict[str, Any]]) -> UsageSummary | None:
    """Fold window summaries: means weighted by samples, maxima over all, idle summed."""
    windows = [w for w in windows if w.get("gpus")]
    if not windows:
        return None
    weights = [max(float(w.get("duration_s") or 0.0), 1.0) for w in windows]
    total = sum(weights)

    def weighted(key: str) -> float:
        return sum(float(w[key]) * k for w, k in zip(windows, weights, strict=True)) / total

    with_sm = [(w, k) for w, k in zip(windows, weights, strict=True) if w.get("sm_activity_mean") is not None]
    sm = (
        sum(float(w["sm_activity_mean"]) * k for w, k in with_sm) / sum(k for _, k in with_sm)
        if with_sm
        else None
    )
    return UsageSummary(
        seconds=sum(float(w.get("duration_s") or 0.0) for w in windows),
        gpus=max(int(w["gpus"]) for w in windows),
        util_mean_pct=weighted("util_mean_pct"),
        util_p95_pct=max(float(w["util_p95_pct"]) for w in windows),
        mem_max_bytes=max(int(w["mem_used_max_bytes"]) for w in windows),
        mem_total_bytes=max(int(w["mem_total_bytes"]) for w in windows),
        idle_seconds=sum(float(w.get("idle_seconds", 0.0)) for w in windows),
        sm_activity_mean=sm,
        throttled_fraction=weighted("throttled_fraction")
        if all("throttled_fraction" in w for w in windows)
        else 0.0,
    )


def diagnose_steps(steps: Sequence[StepTiming], t: Thresholds = Thresholds()) -> list[Finding]:
    usable = list(steps[t.skip_first_steps :]) if len(steps) > t.skip_first_steps else list(steps)
    data = sum(s.data_s for s in usable)
    total = data + sum(s.compute_s for s in usable)
    if not usable or total <= 0:
        return []
    fraction = data / total
    if fraction <= t.input_bound_fraction:
        return []
    severity = "critical" if fraction >= 0.25 else "warning"
    return [
        Finding(
            "input-bound",
            severity,
            f"input-bound: {pct(fraction)} of step time waiting for data "
            f"(over {pct(t.input_bound_fraction)})",
            {
                "data_fraction": round(fraction, 4),
                "steps": len(usable),
                "data_s": round(data, 3),
                "step_s": round(total, 3),
            },
            "raise DataLoader num_workers, enable pin_memory and persistent_workers, prefetch, "
            "or move decoding/augmentation off the training loop",
            time_bound(fraction, f"steps wait {pct(fraction)} on data; once loading keeps up"),
        )
    ]


def diagnose_usage(
    usage: UsageSummary,
    t: Thresholds = Thresholds(),
    gpu_memory_gib: float | None = None,
    candidates: Iterable[GpuCandidate] = (),
) -> list[Finding]:
    findings: list[Finding] = []
    total_bytes = gpu_memory_gib * GIB if gpu_memory_gib else float(usage.mem_total_bytes)
    mem_fraction = usage.mem_max_bytes / total_bytes if total_bytes > 0 else 0.0
    total_gib = total_bytes / GIB
    if usage.util_mean_pct < t.low_util_pct:
        findings.append(
            Finding(
                "low-utilization",
                "warning",
                f"GPU utilization averaged {usage.util_mean_pct:.0f} % (under {t.low_util_pct:.0f} %)",
                {"util_mean_pct": round(usage.util_mean_pct, 1), "util_p95_pct": usage.util_p95_pct},
                "check for input stalls, host-side work or synchronization in the step; raise the batch size",
                time_bound(
                    1 - usage.util_mean_pct / 100,
                    f"GPUs busy {usage.util_mean_pct:.0f} % of the time; kept busy all the time",
                ),
            )
        )
    if mem_fraction > t.high_memory_fraction:
        findings.append(
            Finding(
                "memory-pressure",
                "warning",
                f"peak memory {pct(mem_fraction)} of {total_gib:.0f} GiB "
                f"(over {pct(t.high_memory_fraction)}): close to out-of-memory",
                {"mem_max_gib": round(usage.mem_max_bytes / GIB, 2), "mem_total_gib": round(total_gib, 2)},
                "lower the per-GPU batch (keep the global batch with gradient accumulation), use activation "
                "checkpointing or mixed precision",
                Bound(0.0, "a risk of running out of memory, no throughput lost yet"),
            )
        )
    if usage.sm_activity_mean is not None and usage.sm_activity_mean < t.low_sm_activity:
        findings.append(
            Finding(
                "low-sm-activity",
                "warning",
                f"SM activity averaged {usage.sm_activity_mean:.2f} (under {t.low_sm_activity}): "
                "the GPU is used ineffectively",
                {"sm_activity_mean": round(usage.sm_activity_mean, 3)},
                "use larger batches or fused kernels (torch.compile), and avoid many small kernel launches",
                time_bound(
                    1 - usage.sm_activity_mean,
                    f"SMs active {usage.sm_activity_mean:.2f} of the time; with every SM kept active",
                ),
            )
        )
    gpu_seconds = usage.seconds * usage.gpus
    if gpu_seconds > 0 and usage.idle_seconds / gpu_seconds > t.idle_fraction:
        idle = usage.idle_seconds / gpu_seconds
        findings.append(
            Finding(
                "idle-gpu",
                "critical" if idle >= 0.5 else "warning",
                f"GPUs idle {pct(idle)} of the time "
                f"({usage.idle_seconds:.0f} of {gpu_seconds:.0f} GPU-seconds)",
                {"idle_fraction": round(idle, 4), "idle_gpu_seconds": round(usage.idle_seconds, 1)},
                "use fewer GPUs, make sure every rank gets work, "
                "or stop the job when it waits on something else",
                time_bound(idle, f"{pct(idle)} of the GPU-seconds at 0 % utilization; without them"),
            )
        )
    if usage.throttled_fraction > t.throttled_fraction:
        findings.append(
            Finding(
                "clock-throttled",
                "warning",
                f"clocks slowed by power or thermal limits in {pct(usage.throttled_fraction)} of samples",
                {"throttled_fraction": round(usage.throttled_fraction, 4)},
                "check cooling and power capping on the host; report the node to the provider if it persists",
                time_bound(
                    usage.throttled_fraction,
                    f"clocks slowed in {pct(usage.throttled_fraction)} of samples (counted as no work); "
                    "at full clocks",
                ),
            )
        )
    if mem_fraction < t.oversized_memory_fraction and usage.util_mean_pct < t.low_util_pct and total_gib > 0:
        findings.append(_oversized(usage, mem_fraction, total_gib, t, candidates))
    return findings


def _oversized(
    usage: UsageSummary,
    mem_fraction: float,
    total_gib: float,
    t: Thresholds,
    candidates: Iterable[GpuCandidate],
) -> Finding:
    need_gib = usage.mem_max_bytes / GIB * t.memory_headroom
    fits = sorted(
        (
            c
            for c in candidates
            if c.memory_gib >= need_gib and c.memory_gib < total_gib and c.relative_price < 1.0
        ),
        key=lambda c: (c.relative_price, c.memory_gib),
    )
    names = "/".join(c.gpu_type for c in fits[:3])
    head = f"memory {pct(mem_fraction)} of {total_gib:.0f} GiB and utilization {usage.util_mean_pct:.0f} %"
    evidence: dict[str, Any] = {
        "mem_max_gib": round(usage.mem_max_bytes / GIB, 2),
        "mem_total_gib": round(total_gib, 2),
        "util_mean_pct": round(usage.util_mean_pct, 1),
        "needed_gib_with_headroom": round(need_gib, 2),
    }
    if fits:
        evidence["candidates"] = [asdict(c) for c in fits[:3]]
        message = f"{head}: a smaller GPU ({names}) would do"
        saved = 1 - fits[0].relative_price
        fix = f"move to {fits[0].gpu_type} (~{saved:.0%} cheaper per GPU-hour)"
        bound = Bound(
            round(saved, 4),
            f"{fits[0].gpu_type} costs {fits[0].relative_price:.2f}x per GPU-hour and holds the peak memory; "
            f"at most {saved:.0%} of the spend, if it keeps pace (utilization is {usage.util_mean_pct:.0f} %)",
        )
    else:
        message = f"{head}: a smaller GPU with at least {need_gib:.0f} GiB would do"
        fix = f"choose a GPU type with >= {need_gib:.0f} GiB memory, or set right-size to recommend"
        bound = Bound(None, "no cheaper GPU type known (give --gpu-type to price one from the catalog)")
    return Finding("oversized-gpu", "info", message, evidence, fix, bound)


NOT_MEASURED_CODE = "gpu-not-measured"


def not_measured(why: str | None = None) -> Finding:
    """The finding for a job whose GPU use nobody measured: its GPU rules could not run, which is not
    the same as "no problems" (``why``: the monitor's own message, e.g. that there is no NVML)."""
    reason = why or "no GPU monitor window summaries"
    return Finding(
        NOT_MEASURED_CODE,
        "info",
        f"GPU use not measured ({reason}): utilization, memory and idle time were not checked",
        {"windows": 0},
        "run the job on nodes with an NVIDIA driver (NVML) and the GPU monitor on, "
        "or give --summaries a monitor summary file",
        Bound(None, "not measured: GPU use was not measured, so what it costs is not known"),
    )


def diagnose(
    windows: Sequence[dict[str, Any]] = (),
    steps: Sequence[StepTiming] = (),
    gpu_memory_gib: float | None = None,
    candidates: Iterable[GpuCandidate] = (),
    thresholds: Thresholds = Thresholds(),
    unmeasured_reason: str | None = None,
    gpu_type: str | None = None,
    tuned_headroom: float | None = None,
) -> list[Finding]:
    """Every rule; when no window measured a GPU, a :func:`not_measured` finding instead of the GPU
    rules (``unmeasured_reason``: why, from the monitor's ``unavailable`` record). Then the
    recommendations of :mod:`orchestrator.monitor.recommend` (``gpu_type``: the job's, for mixed
    precision; ``tuned_headroom``: the GPU memory headroom of the runtime's last ``tune`` record)."""
    from orchestrator.monitor.recommend import recommendations

    findings = diagnose_steps(steps, thresholds)
    usage = combine_windows(windows)
    if usage is not None:
        findings += diagnose_usage(usage, thresholds, gpu_memory_gib, candidates)
    else:
        findings.append(not_measured(unmeasured_reason))
    findings += recommendations(usage, steps, thresholds, gpu_type, windows, gpu_memory_gib, tuned_headroom)
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order.get(f.severity, 3))


def unavailable_reason(paths: Iterable[str | Path]) -> str | None:
    """Why the monitor measured nothing, from the ``unavailable`` records of summary files:
    ``no NVML on the nodes: <message>`` (or the monitor's message); None when no file says."""
    for path in paths:
        try:
            lines = Path(path).read_bytes().split(b"\n")
        except OSError:
            continue
        for line in lines:
            record = summary_record(line)
            if record is None or record.get("kind") != UNAVAILABLE_KIND:
                continue
            notice = monitor_unavailable(record)
            if notice.reason == "no_nvml":
                return f"no NVML on the nodes: {notice.message or 'NVML is not available'}"
            return notice.message or notice.reason or "the GPU monitor did not run"
    return None


def read_step_timings(path: str | Path) -> list[StepTiming]:
    """Per-step timings from a progress file: ``data_s``/``compute_s`` at the top or under ``metrics``."""
    return step_timings(read_progress_records(path))


def step_timings(records: Iterable[ProgressRecord]) -> list[StepTiming]:
    """The per-step timings of progress records (:func:`read_step_timings`)."""
    steps = []
    for record in records:
        if record.data_s is not None and record.compute_s is not None:
            steps.append(StepTiming(record.data_s, record.compute_s))
            continue
        data, compute = record.metrics.get("data_s"), record.metrics.get("compute_s")
        if data is not None and compute is not None and _seconds(data) and _seconds(compute):
            steps.append(StepTiming(data, compute))
    return steps


def since_last_tune(records: Sequence[ProgressRecord]) -> tuple[list[StepTiming], float | None]:
    """The step timings after the last ``tuned`` record (the input pipeline the job runs with now),
    and the GPU memory headroom the runtime's last tune record measured (None: not measured)."""
    last = max((i for i, r in enumerate(records) if r.tune is not None), default=-1)
    room = [r.gpu_memory_headroom_share for r in records if r.gpu_memory_headroom_share is not None]
    return step_timings(records[last + 1 :]), (room[-1] if room else None)


def _seconds(value: float) -> bool:
    return 0.0 <= value <= MAX_SECONDS


def diagnose_files(
    summary_path: str | Path | None = None,
    progress_path: str | Path | None = None,
    gpu_memory_gib: float | None = None,
    candidates: Iterable[GpuCandidate] = (),
    thresholds: Thresholds = Thresholds(),
    gpu_type: str | None = None,
) -> list[Finding]:
    """Read a summary file and/or a progress file and run every rule (the steps after the runtime's
    last ``tune`` record; ``gpu_type``: the GPU's type, else the windows' model name)."""
    if summary_path is None and progress_path is None:
        raise UserError("nothing to diagnose", "give a monitor summary file, a progress file, or both")
    for path in (summary_path, progress_path):
        if path is not None and not Path(path).is_file():
            raise NotFoundError(f"{path} does not exist", "check the path (a job folder holds both files)")
    windows = read_summaries(summary_path) if summary_path is not None else []
    records = read_progress_records(progress_path) if progress_path is not None else []
    steps, room = since_last_tune(records)
    why = unavailable_reason([summary_path]) if summary_path is not None else None
    return diagnose(windows, steps, gpu_memory_gib, candidates, thresholds, why, gpu_type, room)
