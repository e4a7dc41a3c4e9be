"""A real SLURM cluster of two nodes on this host for the slow tests (scripts/slurm-dev-cluster.sh)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig
from orchestrator.state.store import JobStore

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "slurm-dev-cluster.sh"
TRAIN = Path(__file__).resolve().parent / "ddp_train.py"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Start the cluster once per session; yields its slurm.conf (SLURM_CONF is set meanwhile)."""
    if os.geteuid() != 0:
        pytest.skip("the dev SLURM cluster runs its daemons as root")
    folder = tmp_path_factory.mktemp("slurm-cluster")
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=600
    )
    conf = folder / "etc" / "slurm.conf"
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        assert started.returncode == 0, f"cluster did not start:\n{started.stdout}\n{started.stderr}"
        yield conf
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(folder)], capture_output=True, timeout=120)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


@pytest.fixture
def cluster_config() -> SlurmClusterConfig:
    return SlurmClusterConfig(
        gres_types={"V100": "fake"},
        partitions={"spot": "spot", "on-demand": "ondemand"},
        prices_usd_per_gpu_hour={"fake": {"spot": 1.0, "ondemand": 3.0}},
        launcher=[sys.executable, "-m", "torch.distributed.run"],
    )


@pytest.fixture
def backend(slurm_cluster: Path, cluster_config: SlurmClusterConfig) -> SlurmBackend:
    return SlurmBackend(cluster_config)


@pytest.fixture
def gpuctl_env(
    slurm_cluster: Path, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> Iterator[dict[str, str]]:
    config_file = tmp_path / "cluster.yaml"
    config_file.write_text(yaml.safe_dump(cluster_config.model_dump(mode="json")))
    env = {
        **os.environ,
        "GPUCTL_HOME": str(tmp_path / "home"),
        "GPUCTL_SLURM_CONFIG": str(config_file),
        "GPUCTL_MONITOR_SOURCE": "off",
    }
    yield env
    lock = tmp_path / "home" / "controller-slurm.lock"
    pid = lock.read_text().strip() if lock.exists() else ""
    if pid.isdigit():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    for job in JobStore(tmp_path / "home").list_jobs():
        subprocess.run(["scancel", f"--name=gpuctl-{job.id}"], check=False)
