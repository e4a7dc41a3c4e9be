"""Recommendations the runtime never applies by itself: mixed precision and a larger per-GPU batch.

Both change the numerics, so `tune: auto` leaves them alone; the diagnosis states them with the
measured GPU memory headroom and the gain as an upper bound with how it was computed:

- **larger batch**: the memory headroom (the monitor's peak memory against the GPU's, else the
  runtime's ``gpu_memory_headroom_share`` of its ``tune`` record) says a larger per-GPU batch fits; a
  batch cannot make a GPU busier than all the time, so the gain is at most the measured utilization
  gap: 1 - util, i.e. at most 100/util times the throughput. Without measured utilization the gain is
  not measured.
- **mixed precision**: only on GPU types with tensor cores (:data:`TENSOR_CORE_RATIO`). 16-bit
  tensor-core math speeds up at most the time the GPU is busy (the measured utilization, and no more
  than the step's compute share when step timings exist), by at most the datasheet ratio r of the
  dense 16-bit tensor-core rate to the rate of the 32-bit math it replaces; the saved share is at most
  busy x (1 - 1/r). It assumes the job trains in 32-bit (nothing records its precision): a job that
  already trains in 16-bit gains nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.monitor.diagnosis import Finding, StepTiming, Thresholds, UsageSummary

RECOMMENDATION_CODES = frozenset({"larger-batch", "mixed-precision"})
"""Findings whose fix changes the numerics: listed and priced, never counted as a job's avoidable spend."""

TENSOR_CORE_RATIO: dict[str, float] = {
    "V100": 8.0,  # 125 TFLOPS FP16 tensor-core against 15.7 FP32 (no TF32)
    "T4": 8.0,  # 65 against 8.1 FP32 (no TF32)
    "A10G": 2.0,  # Ampere and later: dense BF16/FP16 tensor-core rate twice the TF32 rate
    "A100": 2.0,
    "A100-80GB": 2.0,
    "L4": 2.0,
    "L40S": 2.0,
    "H100": 2.0,
    "H200": 2.0,
}
"""GPU types with tensor cores: the datasheet ratio of the dense 16-bit tensor-core rate to the 32-bit
rate it replaces (TF32 where the GPU has it)."""

BATCH_HEADROOM = 0.3
"""A larger batch is recommended when at least this share of the GPU's memory was never used."""
BUSY_ENOUGH_PCT = 90.0
"""At or over this mean utilization a larger batch gains at most 10 %: not recommended."""

MIXED_PRECISION_FIX = (
    "train under torch.autocast(dtype=torch.bfloat16) (float16 with a GradScaler on V100/T4); it changes "
    "the numerics, so gpuctl only recommends it (nothing to gain if the job already trains in 16-bit)"
)
LARGER_BATCH_FIX = (
    "raise the per-GPU batch to fill the headroom (lower gradient accumulation or the GPU count to keep "
    "the global batch, and retune the learning rate); it changes the numerics, so gpuctl only recommends it"
)


def tensor_core_type(gpu_type: str | None, windows: Sequence[dict[str, Any]] = ()) -> str | None:
    """The known tensor-core GPU type of ``gpu_type``, else of the windows' NVML model name
    (``NVIDIA H100 80GB HBM3``); None when neither names one."""
    names = [gpu_type or ""] + [str(w.get("model") or "") for w in windows]
    for name in names:
        for token in name.upper().replace("_", " ").split():
            for known in sorted(TENSOR_CORE_RATIO, key=len, reverse=True):  # A100-80GB before A100
                if token == known or token.startswith(f"{known}-"):
                    return known
    return None


def headroom(
    usage: UsageSummary | None, total_gib: float | None, tuned_headroom: float | None
) -> tuple[float, str] | None:
    """(the share of the GPU's memory never used, where it was measured); None when not measured."""
    total = total_gib * 2**30 if total_gib else (usage.mem_total_bytes if usage is not None else 0)
    if usage is not None and total > 0:
        return max(0.0, 1.0 - usage.mem_max_bytes / total), "monitor windows (peak memory used / total)"
    if tuned_headroom is not None:
        return tuned_headroom, "the runtime's tune record (memory the process never reserved)"
    return None


def recommendations(
    usage: UsageSummary | None,
    steps: Sequence[StepTiming],
    thresholds: Thresholds,
    gpu_type: str | None = None,
    windows: Sequence[dict[str, Any]] = (),
    gpu_memory_gib: float | None = None,
    tuned_headroom: float | None = None,
) -> list[Finding]:
    """The mixed-precision and larger-batch recommendations the measurements support."""
    room = headroom(usage, gpu_memory_gib, tuned_headroom)
    found = []
    batch = _larger_batch(usage, room)
    if batch is not None:
        found.append(batch)
    tensor = tensor_core_type(gpu_type, windows)
    if tensor is not None and usage is not None and usage.util_mean_pct >= thresholds.low_util_pct:
        found.append(_mixed_precision(usage, steps, thresholds, tensor, room))
    return found


def _room_evidence(room: tuple[float, str] | None) -> dict[str, Any]:
    if room is None:
        return {"headroom_share": None, "headroom_from": "not measured"}
    return {"headroom_share": round(room[0], 4), "headroom_from": room[1]}


def _larger_batch(usage: UsageSummary | None, room: tuple[float, str] | None) -> Finding | None:
    from orchestrator.monitor.diagnosis import Bound, Finding, pct

    if room is None or room[0] < BATCH_HEADROOM:
        return None
    if usage is not None and usage.util_mean_pct >= BUSY_ENOUGH_PCT:
        return None
    evidence = _room_evidence(room)
    if usage is None:
        bound = Bound(None, "not measured: GPU utilization was not measured, so the gain of a larger batch "
                            "is not known")  # fmt: skip
    else:
        gap = min(max(1.0 - usage.util_mean_pct / 100.0, 0.0), 0.99)
        evidence["util_mean_pct"] = round(usage.util_mean_pct, 1)
        bound = Bound(round(gap, 4), f"GPUs busy {usage.util_mean_pct:.0f} % of the time; a batch that fills "
                      f"the headroom keeps them busy at most all the time: at most 1/(1-{gap:.2f}) = "
                      f"{1 / (1 - gap):.2f}x the throughput (the measured utilization gap)")  # fmt: skip
    message = f"{pct(room[0])} of GPU memory never used: a larger per-GPU batch fits"
    return Finding("larger-batch", "info", message, evidence, LARGER_BATCH_FIX, bound)


def _mixed_precision(usage: UsageSummary, steps: Sequence[StepTiming], thresholds: Thresholds,
                     gpu_type: str, room: tuple[float, str] | None) -> Finding:  # fmt: skip
    from orchestrator.monitor.diagnosis import Bound, Finding, pct

    ratio = TENSOR_CORE_RATIO[gpu_type]
    busy = usage.util_mean_pct / 100.0
    evidence: dict[str, Any] = {"gpu_type": gpu_type, "util_mean_pct": round(usage.util_mean_pct, 1),
                                "tensor_core_ratio": ratio, **_room_evidence(room)}  # fmt: skip
    basis = f"GPUs busy {pct(busy)}"
    usable = steps[thresholds.skip_first_steps :] if len(steps) > thresholds.skip_first_steps else steps
    total = sum(s.data_s + s.compute_s for s in usable)
    if total > 0:
        compute = sum(s.compute_s for s in usable) / total
        evidence["compute_share"] = round(compute, 4)
        if compute < busy:
            busy, basis = compute, f"compute {pct(compute)} of step time"
    share = min(busy * (1.0 - 1.0 / ratio), 0.99)
    bound = Bound(round(share, 4), f"{basis}; 16-bit tensor-core math at most {ratio:g}x the 32-bit rate "
                  f"({gpu_type} datasheet): at most {pct(busy)} x (1 - 1/{ratio:g}) = {pct(share)} of the "
                  f"time, 1/(1-{share:.2f}) = {1 / (1 - share):.2f}x the throughput, if it trains in 32-bit")  # fmt: skip
    message = f"{gpu_type} has tensor cores: mixed precision can speed up the math (GPUs busy {pct(usage.util_mean_pct / 100)})"
    return Finding("mixed-precision", "info", message, evidence, MIXED_PRECISION_FIX, bound)
