"""Right-size, rescale and resume decisions on recorded numbers."""

from __future__ import annotations

import pytest

from orchestrator.catalog.offers import MarketKind, Offer
from orchestrator.errors import PermanentError, UserError
from orchestrator.policies.rescale import relative_throughput, rescale_target
from orchestrator.policies.rightsize import GpuMeasurement, right_size


def offer(gpu: str, count: int, mem: float, od: float, itype: str) -> Offer:
    return Offer("aws", itype, gpu, count, mem, 8, 64, od, od / 3, "us-east-1", "us-east-1a")


OFFERS = [
    offer("T4", 1, 16, 0.3, "g4dn.xlarge"),
    offer("A10G", 1, 24, 1.0, "g5.xlarge"),
    offer("A100", 8, 40, 32.0, "p4d.24xlarge"),
]
# recorded: samples/s per GPU, peak GiB per GPU, utilization
MEASURED = [
    GpuMeasurement("T4", 100.0, 14.0, 0.95),
    GpuMeasurement("A10G", 250.0, 14.0, 0.9),
    GpuMeasurement("A100", 900.0, 14.0, 0.4),
]


def test_right_size_picks_cheapest_that_meets_deadline() -> None:
    work = 250.0 * 3600 * 10  # 10 h on one A10G, 25 h on one T4
    loose = right_size(MEASURED, work, 30.0, offers=OFFERS)
    assert loose.choice.offer.gpu_type == "T4" and loose.choice.gpus == 1  # 25 h x 0.3 = 7.5 USD
    assert "T4 x1" in loose.reason and "7.50 USD" in loose.reason
    tight = right_size(MEASURED, work, 12.0, offers=OFFERS)
    assert tight.choice.offer.gpu_type == "A10G"  # T4 needs 25 h; A10G 10 h for 10 USD
    multi = right_size(MEASURED, work, 12.0, offers=OFFERS, max_nodes=4)
    assert multi.choice.offer.gpu_type == "T4" and multi.choice.nodes == 3  # 9.9 h x 0.9 USD/h
    spot = right_size(MEASURED, work, 30.0, offers=OFFERS, market=MarketKind.SPOT)
    assert spot.choice.cost_usd == pytest.approx(loose.choice.cost_usd / 3)


def test_right_size_memory_and_impossible_deadline() -> None:
    big = [GpuMeasurement("T4", 100.0, 20.0, 0.9), GpuMeasurement("A10G", 250.0, 20.0, 0.9)]
    choice = right_size(big, 250.0 * 3600, 10.0, offers=OFFERS)
    assert choice.choice.offer.gpu_type == "A10G" and "does not fit" in choice.reason
    with pytest.raises(PermanentError, match="no measured GPU type"):
        right_size(MEASURED, 1e12, 1.0, offers=OFFERS)
    low_util = right_size(MEASURED, 900.0 * 3600 * 8 * 2, 3.0, offers=OFFERS)
    assert low_util.choice.offer.gpu_type == "A100" and "utilization is only 40%" in low_util.reason


def test_rescale_target_and_throughput() -> None:
    assert rescale_target(3, 2, 4, 4) == 3
    assert rescale_target(6, 2, 4, 2) == 4
    assert rescale_target(1, 2, 4, 2) == 0
    assert relative_throughput(4, 4) == pytest.approx(1.0)
    assert relative_throughput(2, 4) == pytest.approx(2 * 0.9 / (4 * 0.81))
    with pytest.raises(UserError):
        rescale_target(3, 3, 2, 0)
