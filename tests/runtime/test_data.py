"""Global batch sampler: deterministic, same global batch for every world size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import UserError
from orchestrator.runtime import GlobalBatchSampler


def test_global_batches_are_deterministic_and_cover_an_epoch() -> None:
    a = GlobalBatchSampler(100, global_batch=10, seed=3)
    b = GlobalBatchSampler(100, global_batch=10, seed=3)
    epoch0 = [i for s in range(10) for i in a.global_indices(s)]
    assert sorted(epoch0) == list(range(100))
    assert [b.global_indices(s) for s in range(25)] == [a.global_indices(s) for s in range(25)]
    assert a.global_indices(10) != a.global_indices(0)  # new permutation per epoch
    assert GlobalBatchSampler(100, 10, seed=4).global_indices(0) != a.global_indices(0)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(20, 300),
    batch=st.integers(1, 20),
    world=st.integers(1, 8),
    micro=st.integers(1, 16),
    step=st.integers(0, 50),
)
def test_ranks_split_exactly_the_global_batch(
    size: int, batch: int, world: int, micro: int, step: int
) -> None:
    if world > batch:
        return
    sampler = GlobalBatchSampler(size, global_batch=batch, seed=1)
    parts = [sampler.for_rank(step, r, world, micro) for r in range(world)]
    together = sorted(i for p in parts for mb in p.micro_batches for i in mb)
    assert together == sorted(sampler.global_indices(step))
    assert len({p.accumulation_steps for p in parts}) == 1  # same number of backward passes everywhere
    for p in parts:
        assert all(len(mb) >= 1 for mb in p.micro_batches)
        assert all(len(mb) <= micro for mb in p.micro_batches) or p.accumulation_steps == batch // world
        weights = sum(p.loss_weight(i) for i in range(p.accumulation_steps))
        assert weights == pytest.approx(sum(len(mb) for mb in p.micro_batches) * world / batch)
    assert sum(len(mb) for p in parts for mb in p.micro_batches) == batch


def test_accumulation_keeps_global_batch_when_world_shrinks() -> None:
    sampler = GlobalBatchSampler(1000, global_batch=64, seed=0)
    four = sampler.for_rank(5, 0, 4, micro_batch=16)
    one = sampler.for_rank(5, 0, 1, micro_batch=16)
    assert four.accumulation_steps == 1 and one.accumulation_steps == 4
    assert sorted(i for mb in one.micro_batches for i in mb) == sorted(sampler.global_indices(5))


def test_global_batch_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_GLOBAL_BATCH", "32")
    assert GlobalBatchSampler(100).global_batch == 32
    monkeypatch.delenv("GPUCTL_GLOBAL_BATCH")
    with pytest.raises(UserError, match="To fix"):
        GlobalBatchSampler(100)
    with pytest.raises(UserError):
        GlobalBatchSampler(10, global_batch=11)
