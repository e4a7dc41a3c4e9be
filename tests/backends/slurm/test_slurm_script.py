"""The generated sbatch script and options, the cluster config and `gpuctl sbatch --dry-run`."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.slurm import SlurmClusterConfig, load_cluster_config, render_batch_job
from orchestrator.backends.slurm.placements import placement_for, request_for
from orchestrator.backends.slurm.script import node_python, node_wrapper, setup_wrapper
from orchestrator.backends.slurm.time_limit import format_time_limit
from orchestrator.catalog.offers import MarketKind
from orchestrator.cli.main import main
from orchestrator.errors import NotFoundError, UserError
from orchestrator.spec import load_spec_text

CONFIG = SlurmClusterConfig(
    gres_types={"A100-80GB": "a100"},
    partitions={MarketKind.SPOT: "preempt", MarketKind.ON_DEMAND: "batch"},
    qos={MarketKind.SPOT: "low"},
    prices_usd_per_gpu_hour={"a100": {"preempt": 1.0, "batch": 3.0}},
)
EVIL = "$(touch /tmp/x) `id`; rm -rf ~ \"'"


def spec_text(**extra: object) -> str:
    doc = {
        "name": "train",
        "command": ["train.py", "--tag", EVIL],
        "env": {"TOKEN": EVIL},
        "labels": {"note": EVIL},
        "setup": "pip install -r requirements.txt",
        "resources": {
            "gpu_types": ["A100-80GB"],
            "gpus_per_node": 4,
            "nodes": {"min": 2, "max": 4},
            "cpus_per_node": 7.5,
            "memory_gib_per_node": 64,
        },
        "checkpoint": {"every": "5m", "notice_grace_seconds": 45.5},
        "goals": {"deadline": "90m"},
        **extra,
    }
    return yaml.safe_dump(doc)


def render(tmp_path: Path, **extra: object) -> str:
    request = request_for(load_spec_text(spec_text(**extra)), "train-1", tmp_path / "job dir", CONFIG)
    return render_batch_job(request, CONFIG).script


def test_sbatch_options(tmp_path: Path) -> None:
    script = render(tmp_path)
    for option in [
        "--job-name=gpuctl-train-1",
        "--comment=gpuctl:train-1:1:A100-80GB",
        "--nodes=2-4",
        "--ntasks-per-node=1",
        "--gres=gpu:a100:4",
        "--signal=B:USR1@46",
        "--requeue",
        "--open-mode=append",
        "--time=0-01:30:00",
        "--cpus-per-task=8",
        "--mem=65536M",
        "--partition=preempt",
        "--qos=low",
    ]:
        assert f"#SBATCH {option}\n" in script
    assert "GPUCTL_CHECKPOINT_EVERY_SECONDS=300" in script
    assert "--nproc-per-node=4" in script and "--rdzv-backend=c10d" in script


def test_on_demand_market_uses_its_partition(tmp_path: Path) -> None:
    script = render(tmp_path, market={"mode": "on-demand"})
    assert "#SBATCH --partition=batch" in script and "--qos" not in script


def test_every_spec_value_is_quoted(tmp_path: Path) -> None:
    script = render(tmp_path)
    assert f"export TOKEN={shlex.quote(EVIL)}\n" in script
    assert f" train.py --tag {shlex.quote(EVIL)} &\n" in script
    # bash itself reads the values back literally
    check = subprocess.run(
        ["bash", "-c", script.split("runs_file=")[0] + 'printf %s "$TOKEN"'], capture_output=True, text=True
    )
    assert check.stdout == EVIL
    assert "rm -rf" in script and "'pip install -r requirements.txt'" in script


def test_time_limit_and_tokens() -> None:
    assert format_time_limit(61) == "0-00:02:00"
    assert format_time_limit(3 * 86400 + 3600) == "3-01:00:00"
    bad = SlurmClusterConfig(partitions={MarketKind.SPOT: "a b"})
    request = request_for(load_spec_text(spec_text()), "train-1", Path("/tmp/j"), bad)
    with pytest.raises(UserError, match="partition"):
        render_batch_job(request, bad)


def test_placement_prices_from_config() -> None:
    placement = placement_for(load_spec_text(spec_text()), CONFIG)
    assert placement.market is MarketKind.SPOT and placement.gpus_per_node == 4
    assert placement.node_price_usd_per_hour == 4.0 and placement.on_demand_node_price_usd_per_hour == 12.0
    assert CONFIG.price_per_gpu_hour("h100", "batch") == 0.0
    assert SlurmClusterConfig().gres_type("V100") == "v100"


def test_cluster_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("gres_types: {V100: v100}\npartitions: {spot: low}\n")
    assert load_cluster_config(path).partition(MarketKind.SPOT) == "low"
    path.write_text("partitons: {spot: low}\n")
    with pytest.raises(UserError, match="invalid"):
        load_cluster_config(path)
    with pytest.raises(NotFoundError):
        load_cluster_config(tmp_path / "missing.yaml")
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPUCTL_SLURM_CONFIG", raising=False)
    assert load_cluster_config() == SlurmClusterConfig()


def test_cli_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    job = tmp_path / "job.yaml"
    job.write_text(spec_text())
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump({"gres_types": {"A100-80GB": "a100"}, "partitions": {"spot": "preempt"}})
    )
    assert main(["sbatch", str(job), "--dry-run", "--cluster-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# sbatch --parsable --output=") and "#SBATCH --gres=gpu:a100:4" in out
    assert f"cd {tmp_path}" in out  # the workdir is relative to the job file


def test_multi_node_rendezvous_is_at_the_first_nodes_address_and_hosted_there_only(tmp_path: Path) -> None:
    script = render(tmp_path, resources={"gpu_types": ["A100-80GB"], "gpus_per_node": 4, "nodes": 2})
    assert 'scontrol show node -o "$head_node"' in script and "NodeAddr=" in script
    assert '--rdzv-endpoint="${head_addr:-$head_node}:$rdzv_port"' in script
    assert 'export GPUCTL_RDZV_HOST_NODE="$head_node"' in script
    assert "is_host=$rdzv_host" in script  # each node's task: true on the head node only
    # fixed size: one failed node ends the step, torchrun never restarts
    assert "srun --kill-on-bad-exit=1 " in script and "--max-restarts=0" in script
    assert "#SBATCH --no-kill" not in script and '--nnodes="$SLURM_JOB_NUM_NODES"' in script
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in script  # no restarts: torch's default store


def test_an_elastic_job_survives_a_lost_node(tmp_path: Path) -> None:
    script = render(tmp_path)  # nodes: {min: 2, max: 4}
    assert "#SBATCH --no-kill\n" in script and "srun --no-kill " in script
    assert '--nnodes=2:"$SLURM_JOB_NUM_NODES"' in script and "--max-restarts=100" in script
    assert "keep_alive_max_attempt=3" in script
    # restarted workers get a store of their own (orchestrator/backends/torchrun.py), set before srun
    assert script.index("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n") < script.index("srun --no-kill ")


def test_a_partition_preemption_is_a_notice(tmp_path: Path) -> None:
    script = render(tmp_path)
    check = script.index("PreemptTime=[0-9]")
    assert script.index("notice=requeue", check) < script.index("scontrol requeue", check)


@pytest.mark.parametrize("source", ["off", "nvml"])
def test_each_nodes_output_is_timed_through_a_process_substitution_never_a_pipeline(
    tmp_path: Path, source: str
) -> None:
    """Issue 32, item 4: no pipe stage between the launcher and SLURM's signals, the launcher's code
    is the task's, and the writer runs with the monitor command's python, quoted."""
    request = request_for(load_spec_text(spec_text()), "train-1", tmp_path / "job dir", CONFIG)
    python = "/opt/py $(id) 'env'/bin/python"
    monitor = MonitorSettings.from_env(
        {
            "GPUCTL_MONITOR_SOURCE": source,
            "GPUCTL_MONITOR_COMMAND": f"{shlex.quote(python)} -m orchestrator.monitor",
        }
    )
    wrapper = node_wrapper(request, monitor)
    writer = f"{shlex.quote(python)} -m orchestrator.backends.output_log"
    assert wrapper.startswith(
        f"trap : TERM\nexec {{output}}> >(trap '' TERM INT HUP QUIT USR1 USR2; {writer} "
    )
    assert ') >&"$output" 2>&1\nrc=$?\nexec {output}>&-\n' in wrapper and wrapper.endswith('exit "$rc"\n')
    assert not [line for line in wrapper.splitlines() if re.search(r"(?<!\|)\|(?!\|)", line)]  # no pipe
    script = render_batch_job(request, CONFIG, monitor).script
    assert f"srun --no-kill bash -c {shlex.quote(wrapper)} gpuctl-node " in script  # elastic: --no-kill
    setup = (
        f"srun bash -c {shlex.quote(setup_wrapper(monitor))} gpuctl-setup 'pip install -r requirements.txt' "
    )
    assert setup + "|| exit $?\n" in script


def test_the_writer_runs_with_python3_unless_the_monitor_command_names_a_python() -> None:
    assert node_python(MonitorSettings()) == ("python3",)
    assert node_python(MonitorSettings(command=("/opt/gpuctl-monitor",))) == ("python3",)
    assert node_python(MonitorSettings(command=("/venv/bin/python", "-I", "-m", "orchestrator.monitor"))) == (
        "/venv/bin/python",
        "-I",
    )
