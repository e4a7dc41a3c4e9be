"""The SLURM backend under the controller: placements from the cluster config, capacity from sinfo,
phases of requeued and noticed runs, and the controller's exact node count. No cluster needed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.base import NodePhase
from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig, render_batch_job
from orchestrator.backends.slurm import commands as slurm_commands
from orchestrator.backends.slurm.parse import parse_sacct
from orchestrator.backends.slurm.placements import DEFAULT_PARTITION, own_placements, request_for
from orchestrator.catalog.offers import MarketKind
from orchestrator.spec import JobSpec, load_spec_text
from tests.backends.slurm.test_slurm_parse import job

CONFIG = SlurmClusterConfig(
    gres_types={"A100-80GB": "a100", "V100": "v100"},
    partitions={MarketKind.SPOT: "preempt", MarketKind.ON_DEMAND: "batch"},
    prices_usd_per_gpu_hour={"a100": {"preempt": 1.0, "batch": 3.0}, "v100": {"preempt": 0.5, "batch": 4.0}},
)


def spec(**resources: object) -> JobSpec:
    doc = {
        "name": "t",
        "command": "train.py",
        "resources": {"gpu_types": ["A100-80GB"], "gpus_per_node": 2, **resources},
    }
    return load_spec_text(yaml.safe_dump(doc))


def test_each_market_is_its_partition_priced_from_the_config() -> None:
    found = own_placements(spec(), CONFIG)
    [spot] = found.spot_by_zone.values()
    assert (spot.zone, spot.market, spot.node_price_usd_per_hour) == ("preempt", MarketKind.SPOT, 2.0)
    assert spot.on_demand_node_price_usd_per_hour == 6.0 and spot.cloud == "slurm"
    assert found.on_demand is not None
    assert (found.on_demand.zone, found.on_demand.node_price_usd_per_hour) == ("batch", 6.0)


def test_gpu_choice_orders_the_types() -> None:
    both = {"gpu_types": ["A100-80GB", "V100"]}
    assert [p.gpu_type for p in own_placements(spec(**both), CONFIG).spot_by_zone.values()] == ["A100-80GB"]
    cheapest = own_placements(spec(**both, gpu_choice="cheapest"), CONFIG)
    assert [p.gpu_type for p in cheapest.spot_by_zone.values()] == ["V100"]  # 0.5 < 1.0 per GPU-hour
    assert cheapest.on_demand is not None and cheapest.on_demand.gpu_type == "A100-80GB"  # 3.0 < 4.0


def test_without_partitions_both_markets_use_the_default_partition() -> None:
    found = own_placements(spec(), SlurmClusterConfig())
    assert list(found.spot_by_zone) == [DEFAULT_PARTITION]
    assert found.on_demand is not None and found.on_demand.node_price_usd_per_hour == 0.0
    only_spot = SlurmClusterConfig(partitions={MarketKind.SPOT: "preempt"})
    assert own_placements(spec(), only_spot).on_demand is None


def test_capacity_counts_nodes_in_service(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        "preempt": "up|idle|2\nup|mix|1\nup|alloc|3\nup|down*|1\nup|drain|2\nup|idle*|1\n",
        "batch": "down|idle|4\n",
    }
    monkeypatch.setattr(slurm_commands, "run_slurm", lambda argv: answers[argv[2].split("=")[1]])
    backend = SlurmBackend(CONFIG, preflight=False, controller_owned=True)
    now = datetime.now(UTC)
    assert backend.spot_capacity("j", "preempt", now) == 6
    assert backend.spot_capacity("j", "batch", now) == 0  # the partition is down
    assert SlurmBackend().spot_capacity("j", DEFAULT_PARTITION, now) is None


@pytest.mark.parametrize(
    ("state", "restarts", "exit_code", "sbatch_phase", "controller_phase"),
    [
        ("RUNNING", 0, None, NodePhase.RUNNING, NodePhase.RUNNING),
        ("COMPLETED", 0, 0, NodePhase.SUCCEEDED, NodePhase.SUCCEEDED),
        ("FAILED", 0, 75, NodePhase.FAILED, NodePhase.PREEMPTED),  # the notice's exit code
        ("FAILED", 0, 1, NodePhase.FAILED, NodePhase.FAILED),
        ("PENDING", 1, None, NodePhase.STARTING, NodePhase.PREEMPTED),  # requeued by SLURM
        ("RUNNING", 1, None, NodePhase.RUNNING, NodePhase.PREEMPTED),  # ... and running again
        ("CANCELLED", 1, None, NodePhase.LOST, NodePhase.PREEMPTED),
    ],
)
def test_phases_under_sbatch_and_under_the_controller(
    state: str, restarts: int, exit_code: int | None, sbatch_phase: NodePhase, controller_phase: NodePhase
) -> None:
    run = job(state, restarts=restarts, exit_code=exit_code)
    assert SlurmBackend(CONFIG).phase_of(run) is sbatch_phase
    assert SlurmBackend(CONFIG, controller_owned=True).phase_of(run) is controller_phase


def test_the_controller_asks_for_exactly_its_nodes(tmp_path: Path) -> None:
    request = request_for(spec(nodes={"min": 1, "max": 4}), "t-1", tmp_path, CONFIG)
    assert "#SBATCH --nodes=1-4" in render_batch_job(request, CONFIG).script
    owned = SlurmBackend(CONFIG, preflight=False, controller_owned=True)
    two = replace(request, node_ids=["a", "b"])
    script = owned.render(two).script
    assert "#SBATCH --nodes=2\n" in script and "requeue_on_notice=0" in script


def test_a_job_slurmctld_forgot_is_found_in_the_accounting_records(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = parse_sacct((Path(__file__).parent / "data" / "sacct-22.05.txt").read_text())
    monkeypatch.setattr(slurm_commands, "list_jobs", lambda: [])
    monkeypatch.setattr(slurm_commands, "accounting_jobs", lambda name: rows if name == "gpuctl-y-1" else [])
    owned = SlurmBackend(CONFIG, preflight=False, controller_owned=True)
    # attempt 2 was requeued by SLURM and then completed (while no controller watched): it finished
    assert [n.phase for n in owned.observe("y-1", 2, ["n0"]).nodes] == [NodePhase.SUCCEEDED]
    assert [n.phase for n in owned.observe("y-1", 3, ["n0"]).nodes] == [NodePhase.FAILED]
    assert [n.phase for n in owned.observe("y-1", 4, ["n0"]).nodes] == [NodePhase.LOST]
