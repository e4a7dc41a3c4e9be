"""SlurmBackend: one sbatch job per attempt; state comes from slurmctld, never from memory.

The job is found again by its name (``gpuctl-<job id>``) and comment (``gpuctl:<job id>:<attempt>``)
among the jobs of the user gpuctl runs as (``commands`` drops every other user's: anyone may submit a
job with the same name and comment); the job's folder by the job's output path.

Two modes:

* ``gpuctl sbatch`` (``controller_owned=False``): SLURM owns recovery. A requeue (notice, node
  failure, ``scontrol requeue``) is a new run of the same SLURM job: ``GPUCTL_ATTEMPT`` = attempt +
  SLURM restart count.
* under the controller (``gpuctl submit --backend slurm``): the controller owns recovery, so each
  attempt is a new sbatch on the partition the market policy picked. A notice ends the run with the
  "preempted" exit code; a run SLURM requeued by itself is reported PREEMPTED (and cancelled by the
  controller's stop) so that it never runs beside the next attempt.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import contract
from orchestrator.backends.base import (
    AttemptObservation,
    LaunchRequest,
    NodeObservation,
    NodePhase,
    OwnPlacements,
)
from orchestrator.backends.progress import read_progress
from orchestrator.backends.secrets import reference_values
from orchestrator.backends.slurm import commands
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.backends.slurm.parse import SlurmJob, map_state
from orchestrator.backends.slurm.placements import DEFAULT_PARTITION, own_placements
from orchestrator.backends.slurm.script import BatchJob, progress_path, render_batch_job, slurm_job_name
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.spec import JobSpec
from orchestrator.state.job_dir import JobDir

log = logging.getLogger(__name__)


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


def _indexed(node_ids: Sequence[str]) -> list[tuple[int, str]]:
    """Each node id with its index in the attempt (the number it ends with: ``JOB-a1-n0``,
    ``JOB-node0``); its position in ``node_ids`` when it ends with none."""
    found = []
    for position, node_id in enumerate(node_ids):
        digits = re.search(r"(\d+)$", node_id)
        found.append((int(digits.group(1)) if digits else position, node_id))
    return found


class SlurmBackend:
    """The :class:`~orchestrator.backends.base.Backend` protocol on a SLURM cluster."""

    name = "slurm"

    def __init__(
        self,
        config: SlurmClusterConfig | None = None,
        preflight: bool = True,
        controller_owned: bool = False,
    ) -> None:
        self.config = config or SlurmClusterConfig()
        self.preflight = preflight
        self.controller_owned = controller_owned
        self._kill_at_memory: dict[int, float] = {}

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

    def render(self, request: LaunchRequest, partition_limit: str | None = None) -> BatchJob:
        """The attempt's sbatch job; ``partition_limit``: the partition's ``MaxTime``, caps ``--time``."""
        return render_batch_job(
            request, self.config, requeue_on_notice=not self.controller_owned, partition_limit=partition_limit
        )

    def launch(self, request: LaunchRequest) -> None:
        """sbatch the attempt unless a job of this attempt is already queued or running."""
        for job in jobs_of(request.job_id, commands.list_jobs()):
            if attempt_of(job) == request.attempt and not job.finished:
                return
        limit = None
        if self.preflight:
            self.check_placement(request.placement.gpu_type, request.placement.market)
            limit = commands.partition_time_limit(self.config.partition(request.placement.market))
        batch = self.render(request, limit)
        if batch.note:  # also the first line of the attempt's output file (`gpuctl logs`)
            log.warning("job %s attempt %d: %s", request.job_id, request.attempt, batch.note)
        where = f"the environment of the gpuctl process that runs sbatch (pid {os.getpid()})"
        secrets = reference_values(request.spec.env, os.environ, where=where)
        request.job_dir.mkdir(parents=True, exist_ok=True)
        slurm_id = commands.submit(batch.sbatch_args, batch.script, extra_env=secrets)
        JobDir(request.job_dir).slurm_job_id(request.attempt).write_text(f"{slurm_id}\n")

    def find(self, job_id: str, attempt: int | None = None) -> SlurmJob | None:
        """The newest SLURM job of ``job_id`` (of one controller attempt when given). One slurmctld
        has forgotten (``MinJobAge``) is looked up in slurmdbd, when the cluster runs it."""
        for source in (commands.list_jobs, lambda: commands.accounting_jobs(slurm_job_name(job_id))):
            jobs = jobs_of(job_id, source())
            if attempt is not None:
                jobs = [j for j in jobs if attempt_of(j) == attempt]
            if jobs:
                return jobs[-1]
        return None

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        job = self.find(job_id, attempt)
        if job is None:
            nodes = tuple(NodeObservation(n, NodePhase.LOST) for n in node_ids)
            return AttemptObservation(nodes)
        phase = self.phase_of(job)
        ended = job.end_time if phase.ended else None
        running = job.node_count if phase is NodePhase.RUNNING else len(node_ids)
        # Under the controller a running job with fewer nodes than asked for lost some (an elastic
        # job runs with --no-kill: SLURM takes a failed node out of it and the survivors go on). The
        # first nodes stay: SLURM keeps the batch host, whose loss would end the job.
        missing = NodePhase.LOST if self.controller_owned else NodePhase.STARTING
        nodes = tuple(
            NodeObservation(
                node_id,
                phase if index < running else missing,
                exit_code=job.exit_code if phase.ended else None,
                ended_at=ended if index < running or not self.controller_owned else datetime.now(UTC),
                queued=phase is NodePhase.STARTING and job.state == "PENDING",
                wait_reason=f"queued in SLURM job {job.job_id} on partition {job.partition} "
                f"(squeue reason: {job.reason or 'none given'})"
                if job.state == "PENDING"
                else None,
            )
            for index, node_id in _indexed(node_ids)
        )
        progress = read_progress(progress_path(Path(job.stdout).parent)) if job.stdout else None
        return AttemptObservation(nodes, progress)

    def phase_of(self, job: SlurmJob) -> NodePhase:
        """The attempt's phase. Under the controller a run that ended with the "preempted" exit code
        (a notice) or that SLURM requeued (node failure, ``scontrol requeue``, partition preemption)
        is PREEMPTED: the controller, not SLURM, starts the next attempt."""
        phase = map_state(job).phase
        if not self.controller_owned:
            return phase
        if job.restarts > 0 and phase is not NodePhase.SUCCEEDED:
            return NodePhase.PREEMPTED
        if job.state == "FAILED" and job.exit_code == contract.PREEMPTED_EXIT_CODE:
            return NodePhase.PREEMPTED
        return phase

    def own_placements(self, spec: JobSpec) -> OwnPlacements:
        """The spot and on-demand partitions of the cluster config, at its prices; with ``preflight``
        each is checked against the cluster first (so ``gpuctl submit`` refuses a missing partition
        or GRES type before anything is stored)."""
        found = own_placements(spec, self.config)
        if self.preflight:
            for placement in [*found.spot_by_zone.values(), found.on_demand]:
                if placement is not None:
                    self.check_placement(placement.gpu_type, placement.market)
        return found

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        """Nodes of the partition ``zone`` in service (partition up; node not down, drained or
        failed), busy or not: like a cloud's spot capacity, queueing behind other jobs is SLURM's
        business. ``None`` for the cluster's unnamed default partition."""
        if zone == DEFAULT_PARTITION and DEFAULT_PARTITION not in self.config.partitions.values():
            return None
        return commands.nodes_in_service(zone)

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
        """USR2 to the batch shell (checkpoint, no requeue) once, remembering when the grace period ends;
        ``scancel`` once it has. Never waits: the controller calls this on every tick for the nodes it
        has ended, so a tick is never held up by one job's grace period."""
        job = self.find(job_id, attempt)
        if job is None or job.finished:
            return
        if job.state == "RUNNING" and all(i >= job.node_count for i, _ in _indexed(node_ids)):
            return  # only nodes SLURM already took out of the job (an elastic job's lost nodes)
        if job.state != "RUNNING" or grace_s <= 0:
            commands.cancel(job.job_id)  # queued, or no grace: nothing to wait for
            return
        kill_at = self._kill_at(job)
        if kill_at is None:
            commands.cancel(job.job_id, signal="USR2", batch_only=True)
            self._set_kill_at(job, time.time() + grace_s)
        elif time.time() >= kill_at:
            commands.cancel(job.job_id)

    def _kill_at_file(self, job: SlurmJob) -> Path | None:
        """Beside the job's output in its job folder, so a restarted controller keeps the deadline."""
        return Path(job.stdout).parent / f"slurm-{job.job_id}.kill_at" if job.stdout else None

    def _kill_at(self, job: SlurmJob) -> float | None:
        path = self._kill_at_file(job)
        if path is None:
            return self._kill_at_memory.get(job.job_id)
        try:
            return float(path.read_text())
        except (OSError, ValueError):
            return None

    def _set_kill_at(self, job: SlurmJob, when: float) -> None:
        path = self._kill_at_file(job)
        if path is None:
            self._kill_at_memory[job.job_id] = when
            return
        try:
            path.write_text(f"{when}\n")
        except OSError:  # the folder is gone or read-only: keep the deadline for this process
            self._kill_at_memory[job.job_id] = when

    def log_paths(self, job_id: str) -> list[Path]:
        paths: list[Path] = []
        for job in jobs_of(job_id, commands.list_jobs()):
            if job.stdout and Path(job.stdout) not in paths:
                paths.append(Path(job.stdout))
        return paths
