"""examples/slurm run as the docs say, `gpuctl sbatch` on the dev cluster, to a trained model (slow).

The fast checks of the same files (spec, cluster config, dry run) are tests/examples/test_slurm_example.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.backends.slurm import load_cluster_config, status_from_slurm
from orchestrator.state.status import JobStatus
from tests.backends.slurm.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
EXAMPLE = ROOT / "examples" / "slurm"


@pytest.mark.parametrize(("job_file", "world"), [("job.yaml", 2), ("job-2-nodes.yaml", 4)])
def test_sbatch_runs_the_example_to_completion(
    slurm_cluster: Path, tmp_path: Path, job_file: str, world: int
) -> None:
    env = {
        **os.environ,
        "GPUCTL_HOME": str(tmp_path / "home"),
        "GPUCTL_MONITOR_SOURCE": "off",
        # the example's launcher is `torchrun`, found on the PATH sbatch runs with
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("GPUCTL_SLURM_CONFIG", None)
    job_dir = tmp_path / "job"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "sbatch", f"examples/slurm/{job_file}",
         "--cluster-config", "examples/slurm/slurm.yaml", "--job-dir", str(job_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    submitted = re.match(r"submitted (\S+) as SLURM job (\d+)", done.stdout)
    assert submitted, done.stdout
    config = load_cluster_config(EXAMPLE / "slurm.yaml")
    deadline = time.monotonic() + 360
    status = status_from_slurm(submitted.group(1), config)
    while not status.status.terminal and time.monotonic() < deadline:
        time.sleep(1)
        status = status_from_slurm(submitted.group(1), config)
    out = job_dir / "slurm-attempt-1.out"
    log = out.read_text() if out.exists() else "(no log)"
    assert status.status is JobStatus.SUCCEEDED, f"{status.status}: {status.message}\n{log}"
    assert f"world size {world}, starting at step 0 of 300" in log and "(reached the target 0.95)" in log, log
    records = [json.loads(line) for line in (job_dir / "progress.jsonl").read_text().splitlines()]
    assert records[-1]["event"] == "finished" and records[-1]["step"] == 300
    assert status.attempts == 1 and [s.market for s in status.segments] == ["spot"]
