"""The job folder's layout: ``$GPUCTL_HOME/jobs/JOB_ID/``, named once for every backend and reader.

::

    jobs/JOB_ID/
        progress.jsonl                   the training progress records (orchestrator.contract)
        monitor-summary-NODE.jsonl       each node's GPU monitor windows (orchestrator.backends.monitoring)
        checkpoints/                     the checkpoints, unless the spec names a location
        attempt-N/NODE_ID/output.log     a local node's output (and its runner's files beside it)
        slurm-attempt-N.out              a SLURM attempt's output, every node's in one
        slurm-runs.log                   when each run of a SLURM attempt started and ended

The local and SLURM backends write it, the controller, ``gpuctl`` and the dashboard read it. The
store creates the folder (0700: its files may hold the job's secrets): :meth:`JobStore.job_dir
<orchestrator.state.store.JobStore.job_dir>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

JOBS_DIR = "jobs"
PROGRESS_FILE = "progress.jsonl"
CHECKPOINTS_DIR = "checkpoints"
OUTPUT_LOG = "output.log"
SUMMARY_PREFIX = "monitor-summary-"
SUMMARY_GLOB = "monitor-summary*.jsonl"
"""Every node's monitor windows (and a summary file of another name, as older versions wrote it)."""
ATTEMPT_PREFIX = "attempt-"
SLURM_OUTPUT_PREFIX = "slurm-attempt-"
SLURM_RUNS_LOG = "slurm-runs.log"


def job_dir_path(home: Path, job_id: str) -> Path:
    """Where the folder of job ``job_id`` is (it may not exist)."""
    return home / JOBS_DIR / job_id


def summary_file_name(node: str) -> str:
    return f"{SUMMARY_PREFIX}{node}.jsonl"


def slurm_output_name(attempt: int | str) -> str:
    """A SLURM attempt's output file, in the job folder (the sbatch script's working directory)."""
    return f"{SLURM_OUTPUT_PREFIX}{attempt}.out"


def attempt_folders(job_dir: Path) -> tuple[list[Path], list[Path]]:
    """The job's ``attempt-<number>`` folders, oldest first, and the other ``attempt-*`` names in it
    (not gpuctl's: left alone)."""
    numbered: list[tuple[int, Path]] = []
    others: list[Path] = []
    for path in sorted(job_dir.glob(f"{ATTEMPT_PREFIX}*")):
        number = path.name.removeprefix(ATTEMPT_PREFIX)
        if number.isascii() and number.isdigit() and path.is_dir():
            numbered.append((int(number), path))
        else:
            others.append(path)
    return [p for _, p in sorted(numbered)], others


@dataclass(frozen=True)
class JobDir:
    """The paths of one job's folder."""

    path: Path

    @classmethod
    def of(cls, home: Path, job_id: str) -> JobDir:
        return cls(job_dir_path(home, job_id))

    @property
    def progress(self) -> Path:
        return self.path / PROGRESS_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    def attempt(self, attempt: int) -> Path:
        return self.path / f"{ATTEMPT_PREFIX}{attempt}"

    def node(self, attempt: int, node_id: str) -> Path:
        return self.attempt(attempt) / node_id

    def output_log(self, attempt: int, node_id: str) -> Path:
        return self.node(attempt, node_id) / OUTPUT_LOG

    def monitor_summary(self, node: str) -> Path:
        return self.path / summary_file_name(node)

    def monitor_summaries(self) -> list[Path]:
        return sorted(self.path.glob(SUMMARY_GLOB))

    def slurm_output(self, attempt: int) -> Path:
        return self.path / slurm_output_name(attempt)

    def slurm_job_id(self, attempt: int) -> Path:
        """The SLURM job id of the attempt, written when sbatch accepted it."""
        return self.path / f"{SLURM_OUTPUT_PREFIX}{attempt}.jobid"

    @property
    def slurm_runs(self) -> Path:
        return self.path / SLURM_RUNS_LOG
