"""One placement type (market typed), and the placements every version persisted still load."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from orchestrator.backends.base import Placement as BackendPlacement
from orchestrator.catalog.offers import MarketKind
from orchestrator.state.job_state import JobState
from orchestrator.state.placement import Placement
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.state_rows import load_state
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
STORED = {"gpu_type": "V100", "market": "on-demand", "cloud": "aws", "region": "us-east-1", "zone": "use1-az1",
          "instance_type": "p3.2xlarge", "gpus_per_node": 1, "node_price_usd_per_hour": 3.0,
          "on_demand_node_price_usd_per_hour": 3.0, "price_source": "test", "written_by": "a newer gpuctl"}  # fmt: skip


def test_backends_and_the_state_share_the_one_type() -> None:
    assert BackendPlacement is Placement


def test_a_gpujob_status_as_operators_wrote_it_loads_with_a_typed_market() -> None:
    old_segment = {"start": "2026-11-22T10:00:00Z", "end": "2026-11-22T11:00:00Z", "market": "spot",
                   "gpuType": "V100", "nodes": 2, "nodePriceUsdPerHour": 1.0}  # fmt: skip
    state = JobState.from_status(
        {"state": "RUNNING", "attempt": 2, "placement": STORED, "segments": [old_segment]}
    )
    assert state.placement is not None and state.placement.market is MarketKind.ON_DEMAND
    assert not state.placement.spot
    (segment,) = state.segments
    assert segment.placement.market is MarketKind.SPOT and segment.placement.spot
    assert segment.placement.on_demand_node_price_usd_per_hour == 1.0  # unknown: no savings claimed
    status = state.to_status()
    assert status["placement"]["market"] == "on-demand" and "gpus_per_node" in status["placement"]
    assert status["segments"][0]["market"] == "spot" and status["segments"][0]["gpuType"] == "V100"
    assert JobState.from_status(status) == state
    no_market = {k: v for k, v in old_segment.items() if k != "market"}
    (unnamed,) = JobState.from_status({"segments": [no_market]}).segments
    assert unnamed.placement.market is MarketKind.ON_DEMAND  # no spot claimed of what nobody recorded


def test_rows_as_the_store_wrote_them_load_and_a_foreign_market_is_a_damaged_row(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = running_job(store, NOW)
    with store.transaction() as conn:  # an attempt row as an older gpuctl wrote it (a plain JSON object)
        conn.execute(
            text("UPDATE attempts SET placement_json = :p WHERE job_id = :j"),
            {"p": json.dumps(STORED), "j": job_id},
        )
    state = load_state(store, job_id)
    assert state.placement is not None and state.placement.market is MarketKind.ON_DEMAND
    assert state.segments[0].placement.market is MarketKind.SPOT
    with store.transaction() as conn:
        conn.execute(text("UPDATE segments SET market = 'preemptible' WHERE job_id = :j"), {"j": job_id})
    with pytest.raises(DamagedRow, match="market"):
        load_state(store, job_id)
