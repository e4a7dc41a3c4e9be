"""The contract between a backend that launches training and the training process itself.

Backends set these environment variables on every node; the runtime helper
(:mod:`orchestrator.runtime`) reads them. Neither side imports the other: this module is the whole
interface, so a training image needs torch and the runtime, not the controller.

torchrun's own variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) are set as usual.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

ENV_JOB_ID = "GPUCTL_JOB_ID"
ENV_ATTEMPT = "GPUCTL_ATTEMPT"
"""1-based attempt number of the job."""
ENV_NODE_ID = "GPUCTL_NODE_ID"
"""Unique id of the node (the backend uses it to find the node's processes again after a restart)."""

ENV_CHECKPOINT_DIR = "GPUCTL_CHECKPOINT_DIR"
"""Where checkpoints live: a local directory or ``s3://bucket/prefix``."""
ENV_CHECKPOINT_EVERY_STEPS = "GPUCTL_CHECKPOINT_EVERY_STEPS"
ENV_CHECKPOINT_EVERY_SECONDS = "GPUCTL_CHECKPOINT_EVERY_SECONDS"
ENV_CHECKPOINT_KEEP = "GPUCTL_CHECKPOINT_KEEP"

ENV_GLOBAL_BATCH = "GPUCTL_GLOBAL_BATCH"
"""Samples per optimizer step, kept when the world size changes (gradient accumulation adapts)."""

ENV_PROGRESS_FILE = "GPUCTL_PROGRESS_FILE"
"""Rank 0 appends one JSON object per line: ``{"time", "step", "total_steps", "loss", "world_size",
"metrics": {...}}``; a final line has ``"event": "finished"`` and may carry ``"metrics"`` such as
``{"accuracy": 0.97}``. The controller reads the last lines for live progress and the summary.

A writer killed mid-append leaves a torn last line; the next writer starts its record on a new line
(see :mod:`orchestrator.runtime.progress`), and every reader uses :func:`read_progress_records`,
which skips torn lines."""

PROGRESS_LINE_PREFIX = "gpuctl-progress "
"""On Kubernetes the monitor sidecar follows the progress file (``--progress-file``) and prints its
records on stdout, each as this prefix and the record's JSON on one line; the operator reads them from
the sidecar's log."""

ENV_NOTICE_SIGNAL = "GPUCTL_NOTICE_SIGNAL"
"""Name of the signal that announces a preemption (default SIGTERM). On it the runtime checkpoints
at the next step boundary on every rank and exits with :data:`PREEMPTED_EXIT_CODE`."""

DEFAULT_NOTICE_SIGNAL = signal.SIGTERM

PREEMPTED_EXIT_CODE = 75
"""Exit code (EX_TEMPFAIL) of a training process that stopped for a preemption notice after saving
a checkpoint: "resume me". torchrun itself exits 1 when signalled, so backends also remember which
nodes they sent a notice to."""

ENV_NOTICE_FILE = "GPUCTL_NOTICE_FILE"
"""Optional path: when this file appears, the runtime treats it as a preemption notice (used by the
monitor sidecar, which polls the cloud's metadata endpoint, on backends where it cannot signal)."""


def training_env(
    *,
    job_id: str,
    checkpoint_dir: str,
    progress_file: str,
    keep: int,
    every_steps: int | None = None,
    every_seconds: float | None = None,
    global_batch: int | None = None,
    attempt: int | None = None,
    node_id: str | None = None,
    notice_file: str | None = None,
    notice_signal: str = DEFAULT_NOTICE_SIGNAL.name,
) -> dict[str, str]:
    """The contract's variables for one node: the one builder every backend uses (local processes,
    the SLURM batch script, Kubernetes pods). Unknown values are left out (SLURM's script computes the
    attempt itself; only Kubernetes has a notice file)."""
    env = {
        ENV_JOB_ID: job_id,
        ENV_CHECKPOINT_DIR: checkpoint_dir,
        ENV_CHECKPOINT_KEEP: str(keep),
        ENV_PROGRESS_FILE: progress_file,
        ENV_NOTICE_SIGNAL: notice_signal,
    }
    optional = {
        ENV_ATTEMPT: attempt,
        ENV_NODE_ID: node_id,
        ENV_NOTICE_FILE: notice_file,
        ENV_CHECKPOINT_EVERY_STEPS: every_steps,
        ENV_CHECKPOINT_EVERY_SECONDS: None if every_seconds is None else f"{every_seconds:g}",
        ENV_GLOBAL_BATCH: global_batch,
    }
    env.update({name: str(value) for name, value in optional.items() if value is not None})
    return env


def parse_progress_records(text: str) -> list[dict[str, Any]]:
    """The records of progress-file text, in order; a line that is not one JSON object is skipped."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # torn by a writer killed mid-append (or the cut start of a tail)
        if isinstance(record, dict):
            records.append(record)
    return records


def read_progress_records(path: str | Path, tail_bytes: int | None = None) -> list[dict[str, Any]]:
    """Every complete record of the progress file at ``path`` (only of its last ``tail_bytes`` when
    given), in file order; [] when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - tail_bytes))
            data = handle.read()
    except OSError:
        return []
    return parse_progress_records(data.decode("utf-8", "replace"))
