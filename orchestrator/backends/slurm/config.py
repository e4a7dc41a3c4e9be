"""The SLURM cluster config: how gpuctl's names map to one cluster's GRES types, partitions and prices.

A YAML file, by default ``$GPUCTL_HOME/slurm.yaml`` (``GPUCTL_SLURM_CONFIG`` or ``--cluster-config``
override it)::

    gres_types: {V100: v100, A100-80GB: a100}     # gpuctl GPU name -> GRES type (--gres=gpu:TYPE:N)
    partitions: {spot: preempt, on-demand: batch}  # a preemptible partition plays "spot"
    qos: {spot: low}                               # optional QOS per market
    prices_usd_per_gpu_hour: {a100: {preempt: 0.9, batch: 2.5}}   # per GRES type and partition
    time_limit: "24:00:00"                         # --time when the job has no deadline
    launcher: [torchrun]                           # how to start torchrun on each node
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.userfiles import load_yaml, read_optional_text, read_text

CONFIG_ENV = "GPUCTL_SLURM_CONFIG"


class SlurmClusterConfig(BaseModel):
    """Everything cluster-specific the SLURM backend needs; defaults suit a plain cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gres_types: dict[str, str] = Field(
        default={}, description="gpuctl GPU name -> GRES type; unmapped names are used lowercased"
    )
    partitions: dict[MarketKind, str] = Field(
        default={}, description="market -> partition; the cluster's default partition when unset"
    )
    qos: dict[MarketKind, str] = {}
    prices_usd_per_gpu_hour: dict[str, dict[str, float]] = Field(
        default={}, description="GRES type -> partition -> price per GPU-hour (0 when missing)"
    )
    time_limit: str = "24:00:00"
    launcher: Annotated[list[str], Field(min_length=1)] = ["torchrun"]
    rendezvous_port_base: Annotated[int, Field(ge=1024, le=60000)] = 20000

    def gres_type(self, gpu_type: str) -> str:
        return self.gres_types.get(gpu_type, gpu_type.lower())

    def partition(self, market: MarketKind) -> str | None:
        return self.partitions.get(market)

    def price_per_gpu_hour(self, gres_type: str, partition: str | None) -> float:
        by_partition = self.prices_usd_per_gpu_hour.get(gres_type, {})
        return by_partition.get(partition or "", 0.0)


def default_config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or home_dir() / "slurm.yaml")


def load_cluster_config(path: str | Path | None = None) -> SlurmClusterConfig:
    """Read the cluster config; a missing default file means "all defaults", a missing named one errs."""
    explicit = path is not None or bool(os.environ.get(CONFIG_ENV))
    file = Path(path) if path is not None else default_config_path()
    fix = "give the path of a cluster config file (see docs/slurm.md), or leave out --cluster-config / GPUCTL_SLURM_CONFIG"
    text = (
        read_text(file, "SLURM cluster config", fix)
        if explicit
        else read_optional_text(file, "SLURM cluster config", fix)
    )
    if text is None:
        return SlurmClusterConfig()
    data = load_yaml(text, f"SLURM cluster config {file}") or {}
    try:
        return SlurmClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(
            f"SLURM cluster config {file} is invalid: {exc}",
            "fix the file; keys: gres_types, partitions, qos, prices_usd_per_gpu_hour, time_limit, launcher",
        ) from exc
