"""``gpuctl status`` without a controller: a SLURM job's gpuctl state, attempts, segments and cost.

Segments come from the job's ``slurm-runs.log`` (the batch script writes a ``start`` and an ``end``
line per run, so each requeue is one segment) and fall back to the job's own start/end times. With
``AccountingStorageType=accounting_storage/none`` this is the only record of earlier runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.backends.slurm import commands
from orchestrator.backends.slurm.backend import attempt_of, gpu_type_of
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.backends.slurm.parse import SlurmJob, map_state
from orchestrator.backends.slurm.script import JOB_NAME_PREFIX, runs_path
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import NotFoundError
from orchestrator.state.records import SegmentRecord
from orchestrator.state.status import FailureReason, JobStatus


@dataclass(frozen=True)
class SlurmJobStatus:
    slurm_job: SlurmJob
    job_id: str
    status: JobStatus
    failure: FailureReason | None
    message: str
    attempts: int
    segments: list[SegmentRecord]

    def cost_usd(self, now: datetime) -> float:
        return sum(s.cost_usd(now) for s in self.segments)


@dataclass(frozen=True)
class Run:
    slurm_id: int
    restart: int
    started_at: datetime
    nodes: int
    ended_at: datetime | None = None


def parse_runs(text: str) -> list[Run]:
    """``start ID RESTART EPOCH NODES NODELIST`` / ``end ID RESTART EPOCH RC [NOTICE]`` lines -> runs."""
    runs: dict[tuple[int, int], Run] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or not all(p.isdigit() for p in parts[1:4]):
            continue
        key = (int(parts[1]), int(parts[2]))
        at = datetime.fromtimestamp(int(parts[3]), UTC)
        if parts[0] == "start" and parts[4].isdigit():
            runs[key] = Run(key[0], key[1], at, int(parts[4]))
        elif parts[0] == "end" and key in runs:
            run = runs[key]
            runs[key] = Run(run.slurm_id, run.restart, run.started_at, run.nodes, at)
    ordered = sorted(runs.values(), key=lambda r: r.started_at)
    # A run killed without an end line (node failure) ended when the next one started.
    return [
        r
        if r.ended_at or i + 1 == len(ordered)
        else Run(r.slurm_id, r.restart, r.started_at, r.nodes, ordered[i + 1].started_at)
        for i, r in enumerate(ordered)
    ]


def segments_of(
    job: SlurmJob, job_id: str, config: SlurmClusterConfig, recorded: list[Run] | None = None
) -> list[SegmentRecord]:
    """One segment per run of ``job``: the ``recorded`` runs (from sacct), else the job folder's
    ``slurm-runs.log``, else the job's own start and end."""
    runs: list[Run] = list(recorded or [])
    if not runs and job.stdout:
        try:
            runs = [
                r
                for r in parse_runs(runs_path(Path(job.stdout).parent).read_text())
                if r.slurm_id == job.job_id
            ]
        except OSError:
            runs = []
    if not runs and job.start_time:
        runs = [Run(job.job_id, job.restarts, job.start_time, max(1, job.node_count), job.end_time)]
    if runs and runs[-1].ended_at is None and job.finished and job.end_time:
        last = runs[-1]
        runs[-1] = Run(last.slurm_id, last.restart, last.started_at, last.nodes, job.end_time)
    markets = {v: k for k, v in config.partitions.items()}
    gpu_names = {v: k for k, v in config.gres_types.items()}
    node_price = config.price_per_gpu_hour(job.gres_type, job.partition) * job.gpus_per_node
    on_demand = config.partition(MarketKind.ON_DEMAND)
    od_price = (
        config.price_per_gpu_hour(job.gres_type, on_demand) * job.gpus_per_node if on_demand else node_price
    )
    return [
        SegmentRecord(
            id=i + 1,
            job_id=job_id,
            attempt=(attempt_of(job) or 1) + run.restart,
            gpu_type=gpu_type_of(job) or gpu_names.get(job.gres_type, job.gres_type),
            instance_type=f"slurm:{job.partition}",
            market=str(markets.get(job.partition, job.partition)),
            cloud="slurm",
            region=job.partition,
            zone=job.nodes,
            nodes=run.nodes,
            gpus_per_node=job.gpus_per_node,
            started_at=run.started_at,
            ended_at=run.ended_at,
            node_price_usd_per_hour=node_price,
            on_demand_node_price_usd_per_hour=od_price,
            price_source="SLURM cluster config",
            end_reason=None,
        )
        for i, run in enumerate(runs)
    ]


def _matches(jobs: list[SlurmJob], name_or_id: str) -> list[SlurmJob]:
    if name_or_id.isdigit():
        return [j for j in jobs if j.job_id == int(name_or_id)]
    full = JOB_NAME_PREFIX + name_or_id
    return [j for j in jobs if j.name == full or j.name.startswith(full + "-")]


def _live_or_recorded(name_or_id: str) -> tuple[list[SlurmJob], dict[int, list[Run]]]:
    """The gpuctl job's SLURM jobs (this user's only) from slurmctld (a SLURM job id, a gpuctl job id or
    a job name: its newest submission), else (forgotten after ``MinJobAge``) from slurmdbd: then each SLURM job's
    runs come from its sacct rows, one per requeue."""
    live = commands.list_jobs()
    matches = _matches(live, name_or_id)
    if not matches:
        rows = commands.accounting_jobs(JOB_NAME_PREFIX + name_or_id) if not name_or_id.isdigit() else []
        if not rows:
            uid, user = commands.submitting_user()
            raise NotFoundError(
                f"no SLURM job '{name_or_id}' of user {user or '?'} (uid {uid}) is known to slurmctld "
                "or its accounting",
                "give the SLURM job id or the job name printed by `gpuctl sbatch`, as the user who "
                "submitted it (other users' jobs are never read); without slurmdbd, finished jobs are "
                "forgotten after the cluster's MinJobAge",
            )
        latest = {row.job_id: row for row in rows}  # rows are oldest first: the newest run wins
        runs: dict[int, list[Run]] = {}
        for row in rows:
            if row.start_time is not None:
                run = Run(row.job_id, row.restarts, row.start_time, max(1, row.node_count), row.end_time)
                runs.setdefault(row.job_id, []).append(run)
        return sorted(latest.values(), key=lambda j: j.job_id), runs
    newest = max(matches, key=lambda j: j.job_id)
    return sorted((j for j in live if j.name == newest.name), key=lambda j: j.job_id), {}


def status_from_slurm(name_or_id: str, config: SlurmClusterConfig | None = None) -> SlurmJobStatus:
    """The job's state from its newest SLURM job; attempts and segments from all of them (a job the
    controller ran has one SLURM job per attempt, each maybe requeued)."""
    config = config or SlurmClusterConfig()
    jobs, recorded = _live_or_recorded(name_or_id)
    newest = jobs[-1]
    job_id = newest.name.removeprefix(JOB_NAME_PREFIX)
    mapping = map_state(newest)
    segments = [seg for job in jobs for seg in segments_of(job, job_id, config, recorded.get(job.job_id))]
    segments = [seg._replace(id=i + 1) for i, seg in enumerate(segments)]
    attempt = attempt_of(newest)
    return SlurmJobStatus(
        slurm_job=newest,
        job_id=job_id,
        status=mapping.status,
        failure=mapping.failure,
        message=mapping.message,
        attempts=(attempt if attempt is not None else 1) + newest.restarts,
        segments=segments,
    )
