"""examples/slurm: the quickstart's job for SLURM and a cluster config for the dev cluster (fast checks).

The run itself on the dev cluster is tests/backends/slurm/test_slurm_example_run.py (slow).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.backends.slurm import load_cluster_config
from orchestrator.catalog.offers import MarketKind
from orchestrator.cli.main import main
from orchestrator.spec.loader import load_spec_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slurm"
QUICKSTART = ROOT / "examples" / "quickstart"
DEV_CLUSTER = ROOT / "scripts" / "slurm-dev-cluster.sh"


def test_the_job_runs_the_quickstart_training_without_a_copy() -> None:
    spec = load_spec_file(EXAMPLE / "job.yaml")
    assert Path(spec.workdir) == QUICKSTART
    assert spec.command_argv[0] == "train.py" and not (EXAMPLE / "train.py").exists()
    assert spec.resources.max_nodes == 1
    two = load_spec_file(EXAMPLE / "job-2-nodes.yaml")
    assert two.resources.max_nodes == 2 and two.command_argv == spec.command_argv
    assert Path(two.workdir) == QUICKSTART
    quickstart = load_spec_file(QUICKSTART / "job.yaml")
    assert spec.command_argv == quickstart.command_argv
    assert (
        spec.checkpoint == quickstart.checkpoint
        and spec.policies.global_batch == quickstart.policies.global_batch
    )


def test_the_cluster_config_names_what_the_dev_cluster_has() -> None:
    config = load_cluster_config(EXAMPLE / "slurm.yaml")
    spec = load_spec_file(EXAMPLE / "job.yaml")
    script = DEV_CLUSTER.read_text()
    [(gres, count)] = re.findall(r"Gres=gpu:(\w+):(\d+)", script)
    partitions = set(re.findall(r"PartitionName=(\w+)", script))
    assert config.gres_type(spec.resources.gpu_types[0]) == gres
    assert spec.resources.gpus_per_node <= int(count)
    assert {config.partition(MarketKind.SPOT), config.partition(MarketKind.ON_DEMAND)} < partitions
    assert "spot" in re.findall(r"PartitionName=(\w+) .*GraceTime", script)  # preemptible, with a grace
    assert config.price_per_gpu_hour(gres, config.partition(MarketKind.SPOT)) > 0


def test_sbatch_dry_run_renders_the_batch_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPUCTL_SLURM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # the workdir is relative to the job file, not to where gpuctl runs
    job, config = EXAMPLE / "job.yaml", EXAMPLE / "slurm.yaml"
    assert main(["sbatch", str(job), "--cluster-config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# sbatch --parsable --output=")
    for line in (
        "#SBATCH --nodes=1",
        "#SBATCH --gres=gpu:fake:2",
        "#SBATCH --partition=spot",
        "#SBATCH --signal=B:USR1@10",
        "#SBATCH --time=01:00:00",
        f"cd {QUICKSTART} || exit 1",
        "export GPUCTL_GLOBAL_BATCH=64",
    ):
        assert line in out.splitlines(), line
    assert "gpuctl-node torchrun " in out and "--nproc-per-node=2" in out and "train.py --steps 300 &" in out
    assert not (tmp_path / "home").exists()  # a dry run writes nothing
