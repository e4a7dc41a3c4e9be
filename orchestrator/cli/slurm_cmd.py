"""`gpuctl sbatch job.yaml [--dry-run]`, and `gpuctl status JOB --backend slurm`: SLURM without a controller."""

from __future__ import annotations

import argparse
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
from orchestrator.cli.secret_checks import check_references_now, warn_plain_secrets
from orchestrator.cli.status_document import slurm_document
from orchestrator.cli.views import print_status
from orchestrator.home import home_dir
from orchestrator.spec import load_spec_file
from orchestrator.state.job_dir import JobDir, job_dir_path


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
    warn_plain_secrets(spec)
    workdir = Path(spec.workdir)
    if not workdir.is_absolute():  # relative to the job file, wherever gpuctl runs
        spec = spec.model_copy(update={"workdir": str((Path(args.file).parent / workdir).resolve())})
    config = load_cluster_config(args.cluster_config)
    job_id = f"{spec.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    home = home_dir()
    job_dir = Path(args.job_dir).resolve() if args.job_dir else job_dir_path(home, job_id)
    request = request_for(spec, job_id, job_dir, config)
    backend = SlurmBackend(config)
    if args.dry_run:
        batch = backend.render(request)
        print("# " + shlex.join(["sbatch", "--parsable", *batch.sbatch_args]) + " < script")
        print(batch.script)
        return 0
    check_references_now(spec)  # sbatch gets the values in its environment, the script never
    backend.launch(request)
    job = backend.find(job_id)
    slurm_id = job.job_id if job else "?"
    print(f"submitted {job_id} as SLURM job {slurm_id}")
    print(f"  logs: {JobDir(request.job_dir).slurm_output(request.attempt)}")
    print(f"  checkpoints: {request.checkpoint_dir}")
    return 0


def status(name_or_id: str, config: SlurmClusterConfig, output: str = "table") -> int:
    """``gpuctl status JOB --backend slurm``: what SLURM says now, no controller state needed; its
    ``avoidable`` spend is "not measured" (SLURM keeps neither step timings nor GPU use)."""
    from orchestrator.cli.document_avoidable import document_avoidable

    doc = slurm_document(status_from_slurm(name_or_id, config)).as_json()
    doc["avoidable"] = document_avoidable(doc).to_dict()
    print_status(doc, output)
    return 0
