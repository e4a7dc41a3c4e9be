"""A DataLoader over the runtime's data position: each rank's micro-batches of each step, in order.

:class:`StepLoader` turns :meth:`GlobalBatchSampler.for_rank` into batches a training loop consumes,
loaded by a torch ``DataLoader`` whose ``num_workers``, ``pin_memory`` and ``prefetch_factor`` can be
changed between any two steps (what ``runtime: {tune: auto}`` does) without changing a single value
the loop sees:

- the indices come from the sampler, so the order is the step's order for every setting;
- each item is loaded with python's ``random``, numpy's global RNG and torch's CPU RNG seeded from
  ``(seed, epoch, index)``, so random augmentations give the same result in the main process or in
  any worker; the main process's own RNG state is put back after each micro-batch it loads itself;
- the ``DataLoader`` draws its worker seeds from a private generator, never the global one.

So a run resumed at step ``s`` (the position is only the step number) sees what an uninterrupted one
sees, with any loader settings.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from orchestrator.runtime.data import GlobalBatchSampler, RankBatch

ItemKey = tuple[int, int]
"""(epoch, sample index): what an item's RNG seed is made from."""


@dataclass(frozen=True)
class LoaderSettings:
    """The loader settings tuning may change: none of them changes what a batch holds."""

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 2
    """Batches each worker loads ahead (ignored without workers)."""

    def as_dict(self) -> dict[str, int | bool]:
        return dict(asdict(self))


@dataclass(frozen=True)
class StepBatch:
    """One step of one rank: its part of the global batch and the collated micro-batches."""

    part: RankBatch
    micro_batches: list[Any]
    data_s: float = 0.0
    """Seconds the training loop waited for this step's data."""

    @property
    def step(self) -> int:
        """0-based: the step this batch is for (report ``step + 1`` to :meth:`Runtime.step_done`)."""
        return self.part.step


_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread hash of a 64-bit value."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


def item_seed(seed: int, epoch: int, index: int) -> int:
    """The RNG seed (32 bits) an item is loaded with: the same in every process, for every setting."""
    mixed = _mix((_mix((_mix(seed & _MASK) + epoch) & _MASK) + index) & _MASK)
    return mixed >> 32


class SeededItems(Dataset[Any]):
    """``dataset`` whose items load under a per-item seed (see the module's docstring)."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: ItemKey) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[ItemKey]) -> list[Any]:
        saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        try:
            items = []
            for epoch, index in keys:
                seed = item_seed(self.seed, epoch, index)
                random.seed(seed)
                np.random.seed(seed)
                torch.default_generator.manual_seed(seed)  # torch.manual_seed also seeds every device: slow
                items.append(self.dataset[index])
            return items
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])


class _StepKeys:
    """The micro-batches of steps ``start..stop`` as lists of item keys, in order."""

    def __init__(self, loader: StepLoader, start: int, stop: int) -> None:
        self.loader, self.start, self.stop = loader, start, stop

    def __iter__(self) -> Iterator[list[ItemKey]]:
        for step in range(self.start, self.stop):
            part = self.loader.part(step)
            epoch = self.loader.sampler.epoch_of(step)
            for indices in part.micro_batches:
                yield [(epoch, i) for i in indices]


class StepLoader:
    """Each rank's batches of steps ``start..stop`` from ``dataset`` (any map-style dataset).

    ``collate_fn`` defaults to torch's ``default_collate``. ``settings`` are the loader's settings to
    start with; :meth:`steps` takes others (the tuner passes the ones it tries)."""

    def __init__(
        self,
        dataset: Any,
        sampler: GlobalBatchSampler,
        *,
        rank: int,
        world_size: int,
        micro_batch: int,
        settings: LoaderSettings | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.dataset = SeededItems(dataset, sampler.seed)
        self.sampler = sampler
        self.rank, self.world_size, self.micro_batch = rank, world_size, micro_batch
        self.settings = settings or LoaderSettings()
        self.collate_fn = collate_fn

    def part(self, step: int) -> RankBatch:
        return self.sampler.for_rank(step, self.rank, self.world_size, self.micro_batch)

    def steps(
        self, start: int, stop: int, settings: LoaderSettings | None = None
    ) -> Generator[StepBatch, None, None]:
        """The batches of steps ``start..stop-1``, loaded with ``settings`` (default: the loader's).

        Closing the iterator early (or dropping it) stops its workers."""
        chosen = settings or self.settings
        workers = chosen.num_workers > 0
        with warnings.catch_warnings():
            # More workers than CPUs is what a loader waiting on storage needs; tuning measures it.
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            loader = DataLoader(
                self.dataset,
                batch_sampler=_StepKeys(self, start, stop),
                num_workers=chosen.num_workers,
                pin_memory=chosen.pin_memory and torch.cuda.is_available(),
                prefetch_factor=chosen.prefetch_factor if workers else None,
                collate_fn=self.collate_fn,
                generator=torch.Generator().manual_seed(self.sampler.seed),
            )
            batches = iter(loader)
        try:
            for step in range(start, stop):
                part = self.part(step)
                micro = [next(batches) for _ in part.micro_batches]
                yield StepBatch(part, micro)
        finally:
            shutdown = getattr(batches, "_shutdown_workers", None)
            if callable(shutdown):
                shutdown()
