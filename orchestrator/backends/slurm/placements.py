"""Placements on a SLURM cluster: one partition per market, priced from the cluster config.

A SLURM cluster has no zones; gpuctl's "zone" of a SLURM placement is its partition, so the market
policies' per-zone history works unchanged (a preemptible partition is a spot "zone"). With no
``partitions`` in the cluster config both markets use the cluster's default partition, named
:data:`DEFAULT_PARTITION` here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from orchestrator.backends.base import LaunchRequest, OwnPlacements, Placement
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.catalog.offers import MarketKind
from orchestrator.spec import GpuChoice, JobSpec, MarketMode
from orchestrator.state.job_dir import JobDir

DEFAULT_PARTITION = "default"
PRICE_SOURCE = "SLURM cluster config"


def slurm_placement(
    gpu_type: str, market: MarketKind, gpus_per_node: int, config: SlurmClusterConfig
) -> Placement:
    partition = config.partition(market)
    gres = config.gres_type(gpu_type)
    price = config.price_per_gpu_hour(gres, partition) * gpus_per_node
    on_demand = config.partition(MarketKind.ON_DEMAND)
    od_price = config.price_per_gpu_hour(gres, on_demand) * gpus_per_node if on_demand else price
    return Placement(
        gpu_type=gpu_type,
        market=market,
        cloud="slurm",
        region=partition or "",
        zone=partition or DEFAULT_PARTITION,
        instance_type=f"slurm:{partition or DEFAULT_PARTITION}",
        gpus_per_node=gpus_per_node,
        node_price_usd_per_hour=price,
        on_demand_node_price_usd_per_hour=od_price,
        price_source=PRICE_SOURCE,
    )


def markets_of(config: SlurmClusterConfig) -> list[MarketKind]:
    """Markets the cluster offers: those with a partition, or both on the default partition."""
    return [m for m in MarketKind if m in config.partitions] if config.partitions else list(MarketKind)


def own_placements(spec: JobSpec, config: SlurmClusterConfig) -> OwnPlacements:
    """The best placement per market for the spec's GPU types (``gpu_choice`` decides ties as in the
    catalog search: ``ordered`` takes the first type, ``cheapest`` the lowest price)."""
    best: dict[MarketKind, Placement] = {}
    for market in markets_of(config):
        options = [
            slurm_placement(t, market, spec.resources.gpus_per_node, config) for t in spec.resources.gpu_types
        ]
        if spec.resources.gpu_choice is GpuChoice.CHEAPEST:
            options.sort(key=lambda p: p.node_price_usd_per_hour)  # stable: spec order breaks ties
        best[market] = options[0]
    spot = best.get(MarketKind.SPOT)
    return OwnPlacements({spot.zone: spot} if spot else {}, best.get(MarketKind.ON_DEMAND))


def placement_for(spec: JobSpec, config: SlurmClusterConfig) -> Placement:
    """A SLURM placement without a controller: the first GPU type, spot unless on-demand only."""
    market = MarketKind.ON_DEMAND if spec.market.mode is MarketMode.ON_DEMAND else MarketKind.SPOT
    return slurm_placement(spec.resources.gpu_types[0], market, spec.resources.gpus_per_node, config)


def request_for(
    spec: JobSpec,
    job_id: str,
    job_dir: Path,
    config: SlurmClusterConfig,
    attempt: int = 1,
    now: datetime | None = None,
) -> LaunchRequest:
    """The launch request of a job submitted straight to SLURM (``gpuctl sbatch``) at ``now``
    (default: the clock), which its deadline counts from."""
    submitted_at = now or datetime.now(UTC)
    checkpoint_dir = spec.checkpoint.path or str(JobDir(job_dir).checkpoints)
    return LaunchRequest(
        job_id=job_id,
        attempt=attempt,
        spec=spec,
        placement=placement_for(spec, config),
        node_ids=[f"{job_id}-node{i}" for i in range(spec.resources.max_nodes)],
        min_nodes=spec.resources.min_nodes,
        max_nodes=spec.resources.max_nodes,
        checkpoint_dir=checkpoint_dir,
        job_dir=job_dir,
        deadline=spec.goals.deadline.resolve(submitted_at) if spec.goals.deadline else None,
    )
