"""SLURM backend: sbatch scripts with requeue-on-notice, job state from squeue/scontrol."""

from orchestrator.backends.slurm.backend import SlurmBackend
from orchestrator.backends.slurm.config import SlurmClusterConfig, load_cluster_config
from orchestrator.backends.slurm.script import BatchJob, render_batch_job
from orchestrator.backends.slurm.status import SlurmJobStatus, status_from_slurm

__all__ = [
    "BatchJob",
    "SlurmBackend",
    "SlurmClusterConfig",
    "SlurmJobStatus",
    "load_cluster_config",
    "render_batch_job",
    "status_from_slurm",
]
