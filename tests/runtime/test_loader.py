"""StepLoader: every loader setting yields the same samples in the same order, random augmentations
included, and leaves the training process's own RNG alone."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from orchestrator.runtime import GlobalBatchSampler, LoaderSettings, StepLoader
from orchestrator.runtime.rng import capture_rng


class Augmented:
    """Each item draws from all three global RNGs, as a random augmentation does."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = torch.rand(1).item() + np.random.rand() + random.random()
        return torch.tensor([float(index), noise])


def _run(settings: LoaderSettings, start: int = 0, stop: int = 12, rank: int = 0) -> list[list[torch.Tensor]]:
    loader = StepLoader(Augmented(), GlobalBatchSampler(40, global_batch=8, seed=5), rank=rank,
                        world_size=2, micro_batch=2, settings=settings)  # fmt: skip
    return [b.micro_batches for b in loader.steps(start, stop)]


def _same(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def test_every_setting_yields_the_same_batches_in_the_same_order() -> None:
    plain = _run(LoaderSettings())
    assert [int(i) for i in plain[0][0][:, 0]] == GlobalBatchSampler(40, 8, seed=5).for_rank(
        0, 0, 2, 2
    ).micro_batches[0]
    for settings in (LoaderSettings(num_workers=2), LoaderSettings(num_workers=3, prefetch_factor=4)):
        assert _same(_run(settings), plain), settings
    assert not _same(_run(LoaderSettings(), rank=1), plain)


def test_a_resumed_loader_sees_what_an_uninterrupted_one_sees() -> None:
    whole = _run(LoaderSettings(), 0, 12)
    assert _same(_run(LoaderSettings(num_workers=2), 7, 12), whole[7:])  # epoch 1 starts at step 5


def test_an_epoch_gives_an_item_new_randomness() -> None:
    epoch0 = {int(t[0]): float(t[1]) for mbs in _run(LoaderSettings(), 0, 5) for mb in mbs for t in mb}
    epoch1 = {int(t[0]): float(t[1]) for mbs in _run(LoaderSettings(), 5, 10) for mb in mbs for t in mb}
    shared = set(epoch0) & set(epoch1)
    assert shared and all(epoch0[i] != epoch1[i] for i in shared)


@pytest.mark.parametrize("workers", [0, 2])
def test_loading_leaves_the_training_rng_alone(workers: int) -> None:
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    before = capture_rng()
    _run(LoaderSettings(num_workers=workers), 0, 3)
    after = capture_rng()
    assert torch.equal(before["torch"], after["torch"]) and before["python"] == after["python"]
    assert torch.equal(before["numpy"]["state"]["key"], after["numpy"]["state"]["key"])
    assert before["numpy"]["state"]["pos"] == after["numpy"]["state"]["pos"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pinned_batches_hold_the_same_values() -> None:
    pinned = _run(LoaderSettings(num_workers=2, pin_memory=True), 0, 4)
    assert all(t.is_pinned() for mbs in pinned for t in mbs)
    assert _same(pinned, _run(LoaderSettings(), 0, 4))
