"""SlurmBackend: one sbatch job per attempt; state comes from slurmctld, never from memory.

The job is found again by its name (``gpuctl-<job id>``) and comment (``gpuctl:<job id>:<attempt>``);
the job's folder by the job's output path. A SLURM requeue (notice, node failure, ``scontrol
requeue``) is a new attempt: ``GPUCTL_ATTEMPT`` = controller attempt + SLURM restart count.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from orchestrator.backends.base import (
    AttemptObservation,
    LaunchRequest,
    NodeObservation,
    NodePhase,
    Placement,
)
from orchestrator.backends.progress import read_progress
from orchestrator.backends.slurm import commands
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.backends.slurm.parse import SlurmJob, map_state
from orchestrator.backends.slurm.script import BatchJob, progress_path, render_batch_job, slurm_job_name
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.spec import JobSpec, MarketMode


def jobs_of(job_id: str, jobs: Sequence[SlurmJob]) -> list[SlurmJob]:
    """The SLURM jobs of one gpuctl job, oldest first."""
    name = slurm_job_name(job_id)
    return sorted((j for j in jobs if j.name == name), key=lambda j: j.job_id)


def attempt_of(job: SlurmJob) -> int | None:
    """From the comment ``gpuctl:JOB:ATTEMPT[:GPU_TYPE]``."""
    parts = job.comment.split(":")
    return int(parts[2]) if len(parts) >= 3 and parts[0] == "gpuctl" and parts[2].isdigit() else None


def gpu_type_of(job: SlurmJob) -> str | None:
    parts = job.comment.split(":")
    return parts[3] if len(parts) == 4 and parts[0] == "gpuctl" else None


class SlurmBackend:
    """The :class:`~orchestrator.backends.base.Backend` protocol on a SLURM cluster."""

    name = "slurm"

    def __init__(self, config: SlurmClusterConfig | None = None, preflight: bool = True) -> None:
        self.config = config or SlurmClusterConfig()
        self.preflight = preflight

    def check_placement(self, gpu_type: str, market: MarketKind) -> None:
        """Clear errors before sbatch: the partition exists and offers the GRES type."""
        partition = self.config.partition(market)
        if partition and partition not in commands.partitions():
            raise UserError(
                f"SLURM partition '{partition}' (for {market} jobs) does not exist on this cluster",
                f"set `partitions: {{{market}: NAME}}` in the SLURM cluster config to one of: "
                f"{', '.join(sorted(commands.partitions()))}",
            )
        gres = self.config.gres_type(gpu_type)
        offered = commands.gres_types_of_partition(partition)
        if gres not in offered:
            raise UserError(
                f"GRES type '{gres}' (GPU type {gpu_type}) is not offered by "
                f"{'partition ' + partition if partition else 'the cluster'}",
                f"map {gpu_type} to one of [{', '.join(sorted(offered)) or 'none'}] under `gres_types:` "
                "in the SLURM cluster config, or pick another GPU type",
            )

    def render(self, request: LaunchRequest) -> BatchJob:
        return render_batch_job(request, self.config)

    def launch(self, request: LaunchRequest) -> None:
        """sbatch the attempt unless a job of this attempt is already queued or running."""
        for job in jobs_of(request.job_id, commands.list_jobs()):
            if attempt_of(job) == request.attempt and not job.finished:
                return
        if self.preflight:
            self.check_placement(request.placement.gpu_type, request.placement.market)
        batch = self.render(request)
        request.job_dir.mkdir(parents=True, exist_ok=True)
        slurm_id = commands.submit(batch.sbatch_args, batch.script)
        (request.job_dir / f"slurm-attempt-{request.attempt}.jobid").write_text(f"{slurm_id}\n")

    def find(self, job_id: str, attempt: int | None = None) -> SlurmJob | None:
        """The newest SLURM job of ``job_id`` (of one controller attempt when given)."""
        jobs = jobs_of(job_id, commands.list_jobs())
        if attempt is not None:
            jobs = [j for j in jobs if attempt_of(j) == attempt]
        return jobs[-1] if jobs else None

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        job = self.find(job_id, attempt)
        if job is None:
            nodes = tuple(NodeObservation(n, NodePhase.LOST) for n in node_ids)
            return AttemptObservation(nodes)
        mapping = map_state(job)
        ended = job.end_time if mapping.phase.ended else None
        running = job.node_count if mapping.phase is NodePhase.RUNNING else len(node_ids)
        nodes = tuple(
            NodeObservation(
                node_id,
                mapping.phase if i < running else NodePhase.STARTING,
                exit_code=job.exit_code if mapping.phase.ended else None,
                ended_at=ended,
            )
            for i, node_id in enumerate(node_ids)
        )
        progress = read_progress(progress_path(Path(job.stdout).parent)) if job.stdout else None
        return AttemptObservation(nodes, progress)

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        partition = self.config.partition(MarketKind.SPOT)
        return commands.idle_nodes(partition) if partition else None

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        """Nothing to do: slurmctld delivers the notice signal and enforces the grace period."""

    def notify(self, job_id: str, attempt: int) -> None:
        """A preemption drill: the job checkpoints, exits and requeues itself."""
        job = self.find(job_id, attempt)
        if job is not None and job.state == "RUNNING":
            commands.cancel(job.job_id, signal="USR1", batch_only=True)

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        """USR2 to the batch shell (checkpoint, no requeue), wait up to ``grace_s``, then scancel."""
        job = self.find(job_id, attempt)
        if job is None or job.finished:
            return
        if job.state == "RUNNING":
            commands.cancel(job.job_id, signal="USR2", batch_only=True)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                current = commands.show_job(job.job_id)
                if current is None or current.finished:
                    return
        commands.cancel(job.job_id)

    def log_paths(self, job_id: str) -> list[Path]:
        paths: list[Path] = []
        for job in jobs_of(job_id, commands.list_jobs()):
            if job.stdout and Path(job.stdout) not in paths:
                paths.append(Path(job.stdout))
        return paths


def placement_for(spec: JobSpec, config: SlurmClusterConfig) -> Placement:
    """A SLURM placement without a controller: the first GPU type, spot unless on-demand only."""
    market = MarketKind.ON_DEMAND if spec.market.mode is MarketMode.ON_DEMAND else MarketKind.SPOT
    gpu_type = spec.resources.gpu_types[0]
    partition = config.partition(market)
    gres = config.gres_type(gpu_type)
    price = config.price_per_gpu_hour(gres, partition) * spec.resources.gpus_per_node
    on_demand = config.partition(MarketKind.ON_DEMAND)
    od_price = config.price_per_gpu_hour(gres, on_demand) * spec.resources.gpus_per_node
    return Placement(
        gpu_type=gpu_type,
        market=market,
        cloud="slurm",
        region=partition or "",
        zone="",
        instance_type=f"slurm:{partition or 'default'}",
        gpus_per_node=spec.resources.gpus_per_node,
        node_price_usd_per_hour=price,
        on_demand_node_price_usd_per_hour=od_price if on_demand else price,
        price_source="SLURM cluster config",
    )


def request_for(
    spec: JobSpec, job_id: str, job_dir: Path, config: SlurmClusterConfig, attempt: int = 1
) -> LaunchRequest:
    """The launch request of a job submitted straight to SLURM (``gpuctl sbatch``)."""
    checkpoint_dir = spec.checkpoint.path or str(job_dir / "checkpoints")
    return LaunchRequest(
        job_id=job_id,
        attempt=attempt,
        spec=spec,
        placement=placement_for(spec, config),
        node_ids=[f"{job_id}-node{i}" for i in range(spec.resources.max_nodes)],
        min_nodes=spec.resources.min_nodes,
        max_nodes=spec.resources.max_nodes,
        checkpoint_dir=checkpoint_dir,
        job_dir=job_dir,
    )
