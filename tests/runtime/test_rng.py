"""RNG capture/restore covers python, numpy and torch."""

from __future__ import annotations

import random

import numpy as np
import torch

from orchestrator.runtime import capture_rng, restore_rng


def _draw() -> tuple[float, float, torch.Tensor]:
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_rng_round_trip_through_a_weights_only_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    _draw()
    torch.save(capture_rng(), tmp_path / "rng.pt")
    expected = _draw()
    _draw()  # move on
    restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True))  # plain values and tensors only
    got = _draw()
    assert got[:2] == expected[:2]
    assert torch.equal(got[2], expected[2])


def test_numpy_gaussian_cache_survives() -> None:
    np.random.seed(3)
    np.random.standard_normal()  # leaves the second gaussian of the pair cached
    state = capture_rng()
    expected = np.random.standard_normal()
    np.random.seed(4)
    restore_rng(state)
    assert np.random.standard_normal() == expected
