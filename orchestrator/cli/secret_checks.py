"""What the CLI says about a job's secrets before it stores or submits anything (see docs/secrets.md).

Values are read here only to check that they can be read; they are dropped at once, never printed.
"""

from __future__ import annotations

import os
import sys

from orchestrator.backends.secrets import reference_values
from orchestrator.spec import JobSpec
from orchestrator.spec.env import FromEnv, secret_looking_names


def plain_secret_warnings(spec: JobSpec) -> list[str]:
    """One line per plain ``env`` value whose name says it is a secret (``HF_TOKEN``, ``DB_PASSWORD``)."""
    return [
        f"warning: env.{name} looks like a secret but its value is written in the job file, so gpuctl "
        "stores and prints it (job database, validate, sbatch --dry-run, the GPUJob). To fix: write "
        f"{name}: {{secret: NAME, key: KEY}} or {name}: {{from_env: {name}}} (see docs/secrets.md)"
        for name in secret_looking_names(spec.env)
    ]


def warn_plain_secrets(spec: JobSpec) -> None:
    for line in plain_secret_warnings(spec):
        print(f"gpuctl: {line}", file=sys.stderr)


def check_references_now(spec: JobSpec, controller_elsewhere: bool = False) -> None:
    """Refuse a job whose secret references cannot be read from here (local and SLURM), before it is
    stored: the launch reads them again, in the process that launches the nodes.

    ``controller_elsewhere``: a controller started from another shell will launch the job, so a
    ``from_env`` variable must be in *its* environment: say so.
    """
    reference_values(spec.env, os.environ, where="this shell's environment")
    from_env = sorted(ref.from_env for ref in spec.env.values() if isinstance(ref, FromEnv))
    if controller_elsewhere and from_env:
        print(
            f"gpuctl: note: a controller is already running; it launches this job with {', '.join(from_env)} "
            "from its own environment (the shell that started it), not from this shell's. If it lacks "
            "them the job waits in LAUNCHING with an error in `gpuctl status`.",
            file=sys.stderr,
        )
