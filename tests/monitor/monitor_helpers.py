"""Shared helpers for the monitor tests."""

from __future__ import annotations

from pathlib import Path

from orchestrator.monitor.samples import GpuSample

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"
H100X8 = DATA / "h100x8_synthetic.jsonl"
GIB = 2**30


def make_sample(
    time: float, gpu: int = 0, util: float = 50.0, mem_gib: float = 10.0, **extra: object
) -> GpuSample:
    fields: dict[str, object] = {
        "time": time,
        "gpu": gpu,
        "uuid": f"GPU-test-{gpu}",
        "model": "NVIDIA H100 80GB HBM3",
        "util_pct": util,
        "mem_used_bytes": int(mem_gib * GIB),
        "mem_total_bytes": 80 * GIB,
        "power_w": 300.0,
        "sm_clock_mhz": 1980.0,
        "temp_c": 50.0,
    }
    fields.update(extra)
    return GpuSample(**fields)  # type: ignore[arg-type]
