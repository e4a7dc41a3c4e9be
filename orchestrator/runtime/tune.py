"""``runtime: {tune: auto}``: pick the input pipeline's loader settings by timing real training steps.

The search is small and bounded. It times a few steps with the script's own settings (the
baseline); a job whose steps wait less than :attr:`TuneConfig.min_wait_share` on data is left as it
is. Otherwise it times each worker count of :func:`worker_candidates`, then, for the best, a deeper
prefetch and (with CUDA) the other ``pin_memory``; it keeps the cheapest setting whose data wait per
step is within a tolerance of the best, times it once more, and runs on with it. Every timed step
is a real training step (nothing is loaded twice or skipped), and the loader settings never change
what a batch holds (:mod:`orchestrator.runtime.loader`), so the search is invisible to the numerics.

With several ranks each times its own steps and all take the slowest rank's numbers (an all-reduce
of the maximum), so every rank picks the same settings at the same step.

When it ends, rank 0 writes one progress record: ``"event": "tuned"`` with the ``tune`` field
(:class:`orchestrator.contract.TuneResult`: mean step seconds before and after, the settings kept),
or ``"event": "tune_unchanged"`` with the reason. Mixed precision and the batch size change the
numerics, so they are never tuned: the records carry the measured data-wait share (and, with CUDA,
the GPU memory headroom) for the diagnosis to turn into recommendations.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from orchestrator.runtime.loader import LoaderSettings, StepBatch, StepLoader

WORKER_LADDER = (2, 4, 8, 16)
"""Worker counts tried (besides the script's own), up to :func:`worker_limit`."""

Agree = Callable[[list[float]], list[float]]
"""Every rank's values to the element-wise maximum over ranks (the identity for one process)."""
Report = Callable[[str, int, dict[str, Any]], None]
"""Write a progress event: (event, step, fields)."""


@dataclass(frozen=True)
class TuneConfig:
    warmup_steps: int = 2
    """Steps of each candidate that are not timed (worker start, the prefetch filling up)."""
    measure_steps: int = 6
    """Steps of each candidate that are timed."""
    min_wait_share: float = 0.10
    """A baseline whose steps wait less than this share of their time on data is not tuned."""
    max_workers: int | None = None
    """The most workers tried per rank; default :func:`worker_limit`."""
    tolerance: float = 0.05
    """Candidates whose data wait is within this share of the baseline step time of the best one's
    count as equal; the cheapest of them is kept."""


@dataclass(frozen=True)
class Trial:
    """The timed steps of one setting: mean seconds per step waiting on data, and in all."""

    settings: LoaderSettings
    wait_s: float
    step_s: float

    @property
    def wait_share(self) -> float:
        return min(1.0, self.wait_s / self.step_s) if self.step_s > 0 else 0.0


def worker_limit(cpus: int | None = None, local_ranks: int | None = None) -> int:
    """The most workers tried per rank: this node's CPUs shared by its ranks, but at least 4 (loaders
    often wait on storage rather than CPU) and at most 16."""
    cpus = cpus if cpus is not None else os.cpu_count() or 1
    ranks = local_ranks if local_ranks is not None else int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    return max(4, min(16, cpus // max(1, ranks)))


def worker_candidates(current: LoaderSettings, limit: int) -> list[LoaderSettings]:
    """The script's settings, then each other worker count of the ladder up to ``limit``."""
    counts = [w for w in WORKER_LADDER if w <= limit and w != current.num_workers]
    return [current] + [replace(current, num_workers=w) for w in counts]


def refinements(best: LoaderSettings, cuda: bool) -> list[LoaderSettings]:
    """Settings next to ``best`` worth timing: a deeper prefetch, and the other pin_memory with CUDA."""
    if best.num_workers == 0:
        return []
    found = [replace(best, prefetch_factor=best.prefetch_factor * 2)] if best.prefetch_factor < 8 else []
    if cuda:
        found.append(replace(best, pin_memory=not best.pin_memory))
    return found


def _cost(settings: LoaderSettings) -> tuple[int, int, bool]:
    return settings.num_workers, settings.prefetch_factor, settings.pin_memory


def choose(trials: list[Trial], baseline: Trial, tolerance: float) -> Trial:
    """The cheapest trial whose data wait is within ``tolerance`` x the baseline step time of the
    least; the baseline wins ties, so a setting that does not help is not taken."""
    least = min(t.wait_s for t in trials)
    margin = tolerance * baseline.step_s
    if baseline.wait_s <= least + margin:
        return baseline
    near = [t for t in trials if t.wait_s <= least + margin]
    return min(near, key=lambda t: _cost(t.settings))


def gpu_headroom_share() -> float | None:
    """The share of this GPU's memory the process never reserved; None without CUDA or when the
    process has not used the GPU (nothing measured)."""
    if not torch.cuda.is_available():
        return None
    reserved = torch.cuda.max_memory_reserved()  # 0, without starting CUDA, in a process that never did
    if not reserved:
        return None
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return max(0.0, 1.0 - reserved / total) if total else None


TrialSteps = Generator[StepBatch, None, Trial | None]


def _timed(batches: Generator[StepBatch, None, None], settings: LoaderSettings, config: TuneConfig,
           agree: Agree) -> TrialSteps:  # fmt: skip
    """Yield warmup + measure steps of ``batches``, timing the measured ones; None when they ran out."""
    waits: list[float] = []
    steps: list[float] = []
    for index in range(config.warmup_steps + config.measure_steps):
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return None
        wait = time.perf_counter() - started
        yield replace(batch, data_s=wait)
        if index >= config.warmup_steps:
            waits.append(wait)
            steps.append(time.perf_counter() - started)
    wait_s, step_s = agree([sum(waits) / len(waits), sum(steps) / len(steps)])
    return Trial(settings, wait_s, step_s)


def _timed_all(batches: Iterator[StepBatch]) -> Iterator[StepBatch]:
    while True:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return
        yield replace(batch, data_s=time.perf_counter() - started)


def timed_steps(loader: StepLoader, start: int, stop: int) -> Iterator[StepBatch]:
    """The loader's batches with the seconds the loop waited for each (tuning off)."""
    return _timed_all(loader.steps(start, stop))


def tuned_steps(loader: StepLoader, start: int, stop: int, *, config: TuneConfig, agree: Agree,
                report: Report) -> Iterator[StepBatch]:  # fmt: skip
    """Batches of steps ``start..stop-1`` while tuning the loader's settings (see the module)."""
    tuner = _Tuner(loader, stop, config, agree)
    result = yield from tuner.search(start)
    if result is None:
        return
    event, fields = result
    report(event, tuner.step, fields)
    yield from _timed_all(tuner.running)


def _nothing() -> Generator[StepBatch, None, None]:
    yield from ()


class _Tuner:
    def __init__(self, loader: StepLoader, stop: int, config: TuneConfig, agree: Agree) -> None:
        self.loader, self.stop, self.config, self.agree = loader, stop, config, agree
        self.step = 0
        self.running: Generator[StepBatch, None, None] = _nothing()

    def _try(self, settings: LoaderSettings, keep: bool = False) -> TrialSteps:
        """Time ``settings`` from the current step; ``keep``: go on with its batches afterwards."""
        batches = self.loader.steps(self.step, self.stop, settings)
        trial = yield from _timed(batches, settings, self.config, self.agree)
        self.step += self.config.warmup_steps + self.config.measure_steps
        if keep:
            self.running = batches
        else:
            batches.close()  # stops its workers
        return trial

    def search(self, start: int) -> Generator[StepBatch, None, tuple[str, dict[str, Any]] | None]:
        self.step = start
        current = self.loader.settings
        baseline = yield from self._try(current, keep=True)
        if baseline is None:
            return None
        advice = {"data_wait_share": round(baseline.wait_share, 4), "gpu_memory_headroom_share":
                  gpu_headroom_share()}  # fmt: skip
        if baseline.wait_share < self.config.min_wait_share:
            return "tune_unchanged", {"reason": "not input-bound", **advice}
        trials = [baseline]
        best = yield from self._search(current, trials, baseline)
        if best is None:
            return None
        if best.settings == current:
            self.running = self.loader.steps(self.step, self.stop, current)
            return "tune_unchanged", {"reason": "no setting was faster", **advice}
        after = yield from self._try(best.settings, keep=True)
        if after is None:
            return None
        self.loader.settings = best.settings
        tune = {"before_step_s": baseline.step_s, "after_step_s": after.step_s,
                "settings": best.settings.as_dict()}  # fmt: skip
        return "tuned", {"tune": tune, **advice}

    def _search(self, current: LoaderSettings, trials: list[Trial], baseline: Trial) -> TrialSteps:
        self.running.close()  # the baseline's loader
        for settings in worker_candidates(current, self.config.max_workers or worker_limit())[1:]:
            trial = yield from self._try(settings)
            if trial is None:
                return None
            trials.append(trial)
        best = choose(trials, baseline, self.config.tolerance)
        for settings in refinements(best.settings, torch.cuda.is_available()):
            trial = yield from self._try(settings)
            if trial is None:
                return None
            trials.append(trial)
        return choose(trials, baseline, self.config.tolerance)
