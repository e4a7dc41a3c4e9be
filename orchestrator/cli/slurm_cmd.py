"""`gpuctl sbatch job.yaml [--dry-run]` and `gpuctl slurm-status JOB`: SLURM without a controller."""

from __future__ import annotations

import argparse
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.backends.slurm import SlurmBackend, load_cluster_config, status_from_slurm
from orchestrator.backends.slurm.backend import request_for
from orchestrator.spec import load_spec_file


def register(sub: Any) -> None:
    sbatch = sub.add_parser(
        "sbatch", help="submit a job to SLURM (requeued from its checkpoint on preemption)"
    )
    sbatch.add_argument("file", help="job spec (job.yaml)")
    sbatch.add_argument("--dry-run", action="store_true", help="print the sbatch command and script only")
    sbatch.add_argument(
        "--cluster-config", default=None, help="SLURM cluster config YAML (default $GPUCTL_HOME/slurm.yaml)"
    )
    sbatch.add_argument(
        "--job-dir", default=None, help="folder for logs and checkpoints (default under GPUCTL_HOME)"
    )
    sbatch.set_defaults(run=run_sbatch)

    status = sub.add_parser("slurm-status", help="state, attempts and cost of a job submitted with sbatch")
    status.add_argument("job", help="job name, gpuctl job id or SLURM job id")
    status.add_argument("--cluster-config", default=None, help="SLURM cluster config YAML (for prices)")
    status.set_defaults(run=run_slurm_status)


def run_sbatch(args: argparse.Namespace) -> int:
    spec = load_spec_file(args.file)
    workdir = Path(spec.workdir)
    if not workdir.is_absolute():  # relative to the job file, wherever gpuctl runs
        spec = spec.model_copy(update={"workdir": str((Path(args.file).parent / workdir).resolve())})
    config = load_cluster_config(args.cluster_config)
    job_id = f"{spec.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    home = Path(os.environ.get("GPUCTL_HOME") or Path.home() / ".gpuctl")
    job_dir = Path(args.job_dir).resolve() if args.job_dir else home / "jobs" / job_id
    request = request_for(spec, job_id, job_dir, config)
    backend = SlurmBackend(config)
    if args.dry_run:
        batch = backend.render(request)
        print("# " + shlex.join(["sbatch", "--parsable", *batch.sbatch_args]) + " < script")
        print(batch.script)
        return 0
    backend.launch(request)
    job = backend.find(job_id)
    slurm_id = job.job_id if job else "?"
    print(f"submitted {job_id} as SLURM job {slurm_id}")
    print(f"  logs: {request.job_dir / f'slurm-attempt-{request.attempt}.out'}")
    print(f"  checkpoints: {request.checkpoint_dir}")
    return 0


def run_slurm_status(args: argparse.Namespace) -> int:
    status = status_from_slurm(args.job, load_cluster_config(args.cluster_config))
    now = datetime.now(UTC)
    job = status.slurm_job
    failure = f" ({status.failure})" if status.failure else ""
    print(f"{status.job_id}: {status.status}{failure} - {status.message}")
    print(f"  attempts: {status.attempts}  partition: {job.partition}  nodes: {job.nodes or '-'}")
    for seg in status.segments:
        end = f"{seg.ended_at:%H:%M:%S}" if seg.ended_at else "now"
        print(
            f"  segment {seg.id}: attempt {seg.attempt}, "
            f"{seg.nodes} node(s) x {seg.gpus_per_node} {seg.gpu_type}, "
            f"{seg.started_at:%H:%M:%S}-{end}, ${seg.cost_usd(now):.4f}"
        )
    print(f"  cost: ${status.cost_usd(now):.4f}")
    if job.stdout:
        print(f"  log: {job.stdout}")
    return 0
