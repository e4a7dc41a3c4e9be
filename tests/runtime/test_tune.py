"""The input-pipeline search of ``runtime: {tune: auto}``: bounded, takes the cheapest setting that
is as fast as the best, leaves a job that does not wait on data alone, and reports before/after."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import pytest
import torch

from orchestrator.contract import progress_record, read_progress_records
from orchestrator.runtime import GlobalBatchSampler, LoaderSettings, StepBatch, StepLoader, TuneConfig
from orchestrator.runtime.tune import (
    Trial,
    choose,
    refinements,
    tuned_steps,
    worker_candidates,
    worker_limit,
)

BASE = LoaderSettings()


def test_worker_candidates_are_few_and_bounded_by_the_cpus() -> None:
    assert worker_limit(cpus=2, local_ranks=2) == 4 and worker_limit(cpus=64, local_ranks=1) == 16
    assert worker_limit(cpus=32, local_ranks=2) == 16 and worker_limit(cpus=24, local_ranks=3) == 8
    assert [s.num_workers for s in worker_candidates(BASE, 4)] == [0, 2, 4]
    assert [s.num_workers for s in worker_candidates(LoaderSettings(num_workers=4), 16)] == [4, 2, 8, 16]
    assert len(worker_candidates(BASE, worker_limit(cpus=10_000, local_ranks=1))) == 5


def test_refinements_try_prefetch_and_pinning_only_with_workers() -> None:
    assert refinements(BASE, cuda=True) == []
    two = LoaderSettings(num_workers=2)
    assert refinements(two, cuda=False) == [LoaderSettings(num_workers=2, prefetch_factor=4)]
    assert LoaderSettings(num_workers=2, pin_memory=True) in refinements(two, cuda=True)


def _trial(workers: int, wait: float, step: float) -> Trial:
    return Trial(LoaderSettings(num_workers=workers), wait, step)


def test_choose_takes_the_cheapest_setting_as_fast_as_the_best() -> None:
    base = _trial(0, 0.30, 0.40)
    trials = [base, _trial(2, 0.05, 0.15), _trial(4, 0.04, 0.14), _trial(8, 0.20, 0.30)]
    assert choose(trials, base, tolerance=0.05).settings.num_workers == 2  # 0.05 is within 0.02 of 0.04
    assert choose(trials, base, tolerance=0.0).settings.num_workers == 4


def test_choose_keeps_the_baseline_when_nothing_is_clearly_faster() -> None:
    base = _trial(0, 0.10, 0.40)
    assert choose([base, _trial(2, 0.09, 0.39), _trial(4, 0.11, 0.41)], base, tolerance=0.05) is base


class FakeLoader(StepLoader):
    """Batches whose loading takes ``wait_s`` without workers and nothing with 4 or more."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(list(range(64)), GlobalBatchSampler(64, 4), rank=0, world_size=1, micro_batch=4)
        self.wait_s = wait_s
        self.started: list[LoaderSettings] = []

    def steps(self, start: int, stop: int, settings: LoaderSettings | None = None) -> Generator[StepBatch]:
        chosen = settings or self.settings
        self.started.append(chosen)
        for step in range(start, stop):
            time.sleep(self.wait_s / (1 + chosen.num_workers) if chosen.num_workers < 4 else 0.0)
            yield StepBatch(self.part(step), [step])


def _tune(
    loader: FakeLoader, compute_s: float, stop: int = 40
) -> tuple[list[int], list[tuple[str, int, Any]]]:
    reports: list[tuple[str, int, Any]] = []
    seen = []
    config = TuneConfig(warmup_steps=1, measure_steps=2, max_workers=4)
    for batch in tuned_steps(loader, 3, stop, config=config, agree=lambda v: v,
                             report=lambda e, s, f: reports.append((e, s, f))):  # fmt: skip
        seen.append(batch.micro_batches[0])
        time.sleep(compute_s)
    return seen, reports


def test_an_input_bound_loop_runs_on_with_the_cheapest_fast_setting_and_reports_it() -> None:
    loader = FakeLoader(wait_s=0.06)
    seen, reports = _tune(loader, compute_s=0.005)
    assert seen == list(range(3, 40)), "every step once, in order, through every switch"
    [(event, step, fields)] = reports
    trials = (
        5 + torch.cuda.is_available()
    )  # baseline, 2 and 4 workers, deeper prefetch, (pinning,) confirmation
    assert event == "tuned" and step == 3 + trials * 3
    record = progress_record({"event": event, "step": step, **fields})
    assert record.tune is not None and record.tune.settings["num_workers"] == 4
    assert record.tune.before_step_s > 2 * record.tune.after_step_s
    assert 0.5 < fields["data_wait_share"] <= 1
    assert loader.settings.num_workers == 4 and loader.started[-1] == loader.settings
    assert len(loader.started) == trials, "the confirmed loader runs on: no other start"


def test_a_compute_bound_loop_is_left_unchanged() -> None:
    loader = FakeLoader(wait_s=0.0)
    seen, reports = _tune(loader, compute_s=0.02)
    assert seen == list(range(3, 40))
    [(event, _, fields)] = reports
    assert event == "tune_unchanged" and fields["reason"] == "not input-bound" and "tune" not in fields
    assert loader.started == [BASE], "the baseline loader runs on; nothing else was tried"


def test_a_run_too_short_to_tune_just_runs() -> None:
    loader = FakeLoader(wait_s=0.03)
    seen, reports = _tune(loader, compute_s=0.0, stop=8)
    assert seen == list(range(3, 8)) and reports == []


@pytest.mark.parametrize("value", ["on", "yes", ""])
def test_the_runtime_refuses_an_unknown_tune_value(value: str, tmp_path: Any) -> None:
    from orchestrator.errors import UserError
    from orchestrator.runtime import Runtime

    with pytest.raises(UserError, match="tune must be off or auto"):
        Runtime(torch.nn.Linear(1, 1), storage=str(tmp_path), tune=value)


class SleepyAugmented:
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        time.sleep(0.004)
        x = torch.full((4,), index % 7 / 7) + 0.1 * torch.randn(4)
        return x, x.sum(0, keepdim=True)


def _train(tune: str, tmp_path: Any) -> tuple[list[Any], list[Any]]:
    from orchestrator.runtime import Runtime

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    config = TuneConfig(warmup_steps=1, measure_steps=2, max_workers=2)
    rt = Runtime(model, opt, storage=str(tmp_path / tune), progress_file=str(tmp_path / f"{tune}.jsonl"),
                 total_steps=24, every_steps=1000, tune=tune, tune_config=config)  # fmt: skip
    loader = StepLoader(SleepyAugmented(), GlobalBatchSampler(256, 8, seed=3), rank=0, world_size=1,
                        micro_batch=4)  # fmt: skip
    for batch in rt.batches(loader, 0):
        for i, (x, y) in enumerate(batch.micro_batches):
            loss = torch.nn.functional.mse_loss(model(x), y) * batch.part.loss_weight(i)
            loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()
        rt.step_done(batch.step + 1, data_s=batch.data_s)
    rt.finish()
    events = [r.event for r in read_progress_records(tmp_path / f"{tune}.jsonl") if r.event]
    return [p.detach().clone() for p in model.parameters()], events


def test_a_tuned_run_trains_bit_identical_to_an_untuned_one(tmp_path: Any) -> None:
    tuned, tuned_events = _train("auto", tmp_path)
    plain, plain_events = _train("off", tmp_path)
    assert "tuned" in tuned_events or "tune_unchanged" in tuned_events
    assert not [e for e in plain_events if e.startswith("tune")]
    assert all(bool(torch.isfinite(a).all()) for a in plain)
    assert all(torch.equal(a, b) for a, b in zip(tuned, plain, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_with_cuda_pinning_is_tried_and_the_memory_headroom_reported() -> None:
    loader = FakeLoader(wait_s=0.06)
    _, reports = _tune(loader, compute_s=0.005)
    assert reports[0][2]["gpu_memory_headroom_share"] is None, "the process has not used the GPU yet"
    torch.ones(1, device="cuda")
    loader = FakeLoader(wait_s=0.06)
    _, reports = _tune(loader, compute_s=0.005)
    assert LoaderSettings(num_workers=4, pin_memory=True) in loader.started
    [(_, _, fields)] = reports
    assert 0 < fields["gpu_memory_headroom_share"] < 1
