"""A GPUCTL_HOME whose jobs' progress and monitor files hold what job code wrote (untrusted), and the
strict JSON reader the CLI's JSON output must satisfy."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main
from orchestrator.state.store import JobStore
from orchestrator.testing import states

PROGRESS: dict[str, Any] = {"time": "2026-11-22T12:00:01+00:00", "step": 7, "total_steps": 100, "loss": 0.5,
                            "world_size": 2, "metrics": {"lr": 0.1}, "data_s": 0.1, "compute_s": 0.4}  # fmt: skip
WINDOW: dict[str, Any] = {
    "kind": "gpuctl.monitor.window", "job_id": "j", "start": 1_800_000_000.0, "end": 1_800_000_060.0,
    "duration_s": 60.0, "gpus": 1, "model": "NVIDIA A10G", "util_mean_pct": 40.0, "util_p95_pct": 60.0,
    "util_max_pct": 70.0, "mem_used_mean_bytes": 2**30, "mem_used_p95_bytes": 2**31, "mem_used_max_bytes": 2**32,
    "mem_total_bytes": 24 * 2**30, "sm_activity_mean": 0.5, "idle_seconds": 3.0, "idle_threshold_pct": 1.0,
    "throttled_fraction": 0.0, "per_gpu": [{"gpu": 0, "samples": 60}],
}  # fmt: skip


def running_job(store: JobStore, name: str) -> str:
    """A RUNNING local job with an open segment (so status has a forecast to make)."""
    started = datetime.now(UTC) - timedelta(hours=1)
    return states.running_job(store, started, name=name, nodes=2)


def write_lines(path: Path, lines: Sequence[str | bytes]) -> None:
    path.write_bytes(b"".join((x.encode() if isinstance(x, str) else x) + b"\n" for x in lines))


def _refuse(constant: str) -> Any:
    raise ValueError(f"not strict JSON: {constant}")


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (RFC 8259 has none of them)."""
    return json.loads(text, parse_constant=_refuse)


def gpuctl(*argv: str) -> tuple[int, str]:
    """Run the CLI in this process; its exit code and standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()
