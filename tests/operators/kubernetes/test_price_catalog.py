from __future__ import annotations

from pathlib import Path

import pytest

from operators.kubernetes.reconcile import _candidates
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones
from orchestrator.spec import load_spec_text

HEADER = "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"


def test_the_charts_price_catalog_replaces_the_built_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = tmp_path / "prices.csv"
    catalog.write_text(HEADER + "onprem,rack-a,H100,8,80,96,1024,40.0,,dc1,dc1-a\n")
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(catalog))
    found = _candidates(
        load_spec_text("name: j\ncommand: t.py\nresources: {gpu_types: [H100], gpus_per_node: 8}\n"),
        ClusterZones(),  # a cluster that shows no zones: every offer of the catalog
    )
    spot, on_demand = found.cheapest_spot, found.on_demand
    assert spot is None, "the catalog has no spot price"
    assert on_demand is not None and on_demand.instance_type == "rack-a"
    assert on_demand.node_price_usd_per_hour == 40.0 and on_demand.price_source == "chart price catalog"
