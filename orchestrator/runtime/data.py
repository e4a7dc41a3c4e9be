"""The data position of a job: which samples each optimizer step uses, on each rank.

The position is only the step number. Step ``s`` uses the global batch
``permutation(epoch)[(s % steps_per_epoch) * G : ... + G]`` where the permutation is seeded by
``seed + epoch``; so resuming needs no sampler state, and the global batch ``G`` is the same for
every world size. Each rank takes a strided share of it and splits that share into
``accumulation_steps = ceil(G / (world_size * micro_batch))`` micro-batches.

Bit-identical results across an interruption hold for the same world size. When the world size
changes (elastic), every step still sees the same samples, but their grouping into ranks and
micro-batches changes, so floating-point sums may round differently.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from orchestrator.contract import ENV_GLOBAL_BATCH
from orchestrator.errors import UserError


@dataclass(frozen=True)
class RankBatch:
    """One rank's part of one optimizer step."""

    step: int
    micro_batches: list[list[int]]
    global_batch: int
    world_size: int

    @property
    def accumulation_steps(self) -> int:
        return len(self.micro_batches)

    def loss_weight(self, index: int) -> float:
        """Multiply micro-batch ``index``'s mean loss by this so the DDP-averaged gradient is the
        mean over the whole global batch (DDP divides by the world size)."""
        return len(self.micro_batches[index]) * self.world_size / self.global_batch


class GlobalBatchSampler:
    """Deterministic global batches over ``dataset_size`` samples; the remainder of an epoch is dropped."""

    def __init__(self, dataset_size: int, global_batch: int | None = None, seed: int = 0) -> None:
        if global_batch is None:
            env = os.environ.get(ENV_GLOBAL_BATCH)
            if not env:
                raise UserError(
                    "no global batch size given",
                    f"pass global_batch=... or set {ENV_GLOBAL_BATCH} (policies.global_batch in job.yaml)",
                )
            global_batch = int(env)
        if global_batch < 1 or global_batch > dataset_size:
            raise UserError(
                f"global batch {global_batch} does not fit a dataset of {dataset_size} samples",
                "choose a global batch between 1 and the dataset size",
            )
        self.dataset_size = dataset_size
        self.global_batch = global_batch
        self.seed = seed
        self.steps_per_epoch = dataset_size // global_batch
        self._perm_epoch = -1
        self._perm: np.ndarray = np.arange(0)

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng(self.seed + epoch).permutation(self.dataset_size)
            self._perm_epoch = epoch
        return self._perm

    def global_indices(self, step: int) -> list[int]:
        """The ``global_batch`` sample indices used by optimizer step ``step`` (0-based)."""
        if step < 0:
            raise ValueError("step must be >= 0")
        perm = self._permutation(self.epoch_of(step))
        start = (step % self.steps_per_epoch) * self.global_batch
        return [int(i) for i in perm[start : start + self.global_batch]]

    def for_rank(self, step: int, rank: int, world_size: int, micro_batch: int) -> RankBatch:
        """Rank ``rank``'s micro-batches of step ``step``; every rank gets the same number of them."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        if micro_batch < 1:
            raise ValueError("micro_batch must be >= 1")
        if world_size > self.global_batch:
            raise UserError(
                f"world size {world_size} is larger than the global batch {self.global_batch}",
                "use fewer processes or a larger global batch",
            )
        share = self.global_indices(step)[rank::world_size]
        accumulation = math.ceil(self.global_batch / (world_size * micro_batch))
        accumulation = min(accumulation, self.global_batch // world_size)
        chunks = [list(c) for c in np.array_split(np.asarray(share, dtype=np.int64), accumulation)]
        return RankBatch(step, [[int(i) for i in c] for c in chunks], self.global_batch, world_size)
