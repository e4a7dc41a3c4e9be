"""The contract between a backend that launches training and the training process itself.

Backends set these environment variables on every node; the runtime helper
(:mod:`orchestrator.runtime`) reads them. Neither side imports the other: this package is the whole
interface, so a training image needs torch and the runtime, not the controller.

What job code and the GPU monitor write (progress records, monitor summary lines) is untrusted; the
one parser of each (:mod:`orchestrator.contract.progress`, :mod:`orchestrator.contract.windows`) turns
it into typed, finite, bounded values and refuses the rest, and every reader goes through it.

torchrun's own variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) are set as usual.
"""

from __future__ import annotations

import signal

from orchestrator.contract.fields import BadRecord
from orchestrator.contract.progress import (
    ProgressRecord,
    TuneResult,
    parse_progress_records,
    progress_record,
    read_progress_records,
)
from orchestrator.contract.windows import (
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    MonitorUnavailable,
    WindowSummary,
    monitor_unavailable,
    summary_record,
    window_summary,
)

__all__ = [
    "UNAVAILABLE_KIND",
    "WINDOW_KIND",
    "BadRecord",
    "MonitorUnavailable",
    "ProgressRecord",
    "TuneResult",
    "WindowSummary",
    "monitor_unavailable",
    "parse_progress_records",
    "progress_record",
    "read_progress_records",
    "summary_record",
    "window_summary",
]

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
"metrics": {...}, "data_s", "compute_s"}``; a final line has ``"event": "finished"`` and may carry
``"metrics"`` such as ``{"accuracy": 0.97}``. The controller reads the last lines for live progress and
the summary.

Types: ``time`` an ISO 8601 string with a UTC offset; ``step`` and ``total_steps`` whole numbers from 0
to 10**15, ``world_size`` from 1; ``loss`` a number; ``metrics`` an object (its entries that are not
numbers are ignored); ``data_s``/``compute_s`` seconds; ``event`` a string; any of them may be absent or
null, and no number anywhere may be non-finite. A record that breaks this is skipped, with one warning
per file.

With ``runtime: {tune: auto}`` the runtime writes, when tuning its input pipeline ends, a record with
``"event": "tuned"`` and ``"tune": {"before_step_s", "after_step_s", "settings": {...}}``: mean step
seconds before and after, and the loader settings kept (names to strings, whole numbers or booleans;
at most 32 of them); see :class:`TuneResult`.

A writer killed mid-append leaves a torn last line; the next writer starts its record on a new line
(see :mod:`orchestrator.runtime.progress`), and every reader uses :func:`read_progress_records`,
which skips torn lines and invalid records (:class:`ProgressRecord`)."""

ENV_TUNE = "GPUCTL_TUNE"
"""``auto`` when the job spec says ``runtime: {tune: auto}``: the runtime tunes its input pipeline
(:mod:`orchestrator.runtime.tune`); unset or ``off``: it runs with the settings the script gave."""

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
    tune: str | None = None,
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
        ENV_TUNE: tune,
    }
    env.update({name: str(value) for name, value in optional.items() if value is not None})
    return env
