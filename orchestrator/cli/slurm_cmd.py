"""`gpuctl sbatch job.yaml [--dry-run]`, and `gpuctl status JOB --backend slurm`: SLURM without a controller."""

from __future__ import annotations

import argparse
import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.backends.slurm import (
    SlurmBackend,
    SlurmClusterConfig,
    load_cluster_config,
    status_from_slurm,
)
from orchestrator.backends.slurm.placements import request_for
from orchestrator.home import home_dir
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


def run_sbatch(args: argparse.Namespace) -> int:
    spec = load_spec_file(args.file)
    workdir = Path(spec.workdir)
    if not workdir.is_absolute():  # relative to the job file, wherever gpuctl runs
        spec = spec.model_copy(update={"workdir": str((Path(args.file).parent / workdir).resolve())})
    config = load_cluster_config(args.cluster_config)
    job_id = f"{spec.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    home = home_dir()
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


def status(name_or_id: str, config: SlurmClusterConfig, output: str = "text") -> int:
    """``gpuctl status JOB --backend slurm``: what SLURM says now, no controller state needed."""
    found = status_from_slurm(name_or_id, config)
    now = datetime.now(UTC)
    job = found.slurm_job
    if output == "json":
        doc = {
            "id": found.job_id,
            "state": str(found.status),
            "failure": str(found.failure) if found.failure else None,
            "message": found.message,
            "attempts": found.attempts,
            "slurm_job_id": job.job_id,
            "partition": job.partition,
            "nodes": job.nodes,
            "segments": [
                {
                    "attempt": s.attempt,
                    "nodes": s.nodes,
                    "gpu_type": s.gpu_type,
                    "market": s.market,
                    "started_at": s.started_at.isoformat(),
                    "ended_at": s.ended_at.isoformat() if s.ended_at else None,
                    "cost_usd": round(s.cost_usd(now), 6),
                }
                for s in found.segments
            ],
            "cost_usd": round(found.cost_usd(now), 6),
            "log": job.stdout or None,
        }
        print(json.dumps(doc, indent=2))
        return 0
    failure = f" ({found.failure})" if found.failure else ""
    print(f"{found.job_id}: {found.status}{failure} - {found.message}")
    print(f"  attempts: {found.attempts}  partition: {job.partition}  nodes: {job.nodes or '-'}")
    for seg in found.segments:
        end = f"{seg.ended_at:%H:%M:%S}" if seg.ended_at else "now"
        print(
            f"  segment {seg.id}: attempt {seg.attempt}, {seg.market}, "
            f"{seg.nodes} node(s) x {seg.gpus_per_node} {seg.gpu_type}, "
            f"{seg.started_at:%H:%M:%S}-{end}, ${seg.cost_usd(now):.4f}"
        )
    print(f"  cost: ${found.cost_usd(now):.4f}")
    if job.stdout:
        print(f"  log: {job.stdout}")
    return 0
