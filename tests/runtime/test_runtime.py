"""Runtime in one process: progress lines, async checkpoints, notices, exact resume."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from orchestrator.contract import PREEMPTED_EXIT_CODE
from orchestrator.errors import UserError
from orchestrator.runtime import LocalStorage, NoticeWatcher, Runtime, parse_signal
from orchestrator.runtime import runtime as runtime_module


def _setup(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def _train(
    rt: Runtime, model: nn.Module, opt: torch.optim.Optimizer, sched: object, start: int, end: int
) -> None:
    for step in range(start, end):
        x = torch.randn(16, 4)  # torch RNG: must be restored for an exact resume
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()  # type: ignore[attr-defined]
        rt.step_done(step + 1, loss=loss, data_s=0.0, compute_s=0.001)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_interrupted_run_resumes_bit_identical(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    rt = Runtime(model, opt, sched, storage=str(tmp_path / "a"), every_steps=4, total_steps=10)
    assert rt.resume() == 0
    _train(rt, model, opt, sched, 0, 10)
    rt.finish()
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    model, opt, sched = _setup()
    rt = Runtime(model, opt, sched, storage=str(tmp_path / "b"), every_steps=4, total_steps=10)
    _train(rt, model, opt, sched, 0, 6)  # "crash" after step 6: steps 5-6 are lost
    rt.wait()
    torch.manual_seed(123)  # a fresh process has other RNG state
    model, opt, sched = _setup(seed=99)
    rt = Runtime(model, opt, sched, storage=str(tmp_path / "b"), every_steps=4, total_steps=10)
    assert rt.resume() == 4
    _train(rt, model, opt, sched, 4, 10)
    rt.finish()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reference[name]), name


def test_progress_lines_and_finish(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    progress = tmp_path / "progress.jsonl"
    rt = Runtime(
        model,
        opt,
        sched,
        storage=str(tmp_path / "ck"),
        every_steps=2,
        progress_file=str(progress),
        total_steps=3,
    )
    _train(rt, model, opt, sched, 0, 3)
    rt.finish(metrics={"accuracy": 0.5})
    lines = _lines(progress)
    steps = [ln for ln in lines if "event" not in ln]
    assert [ln["step"] for ln in steps] == [1, 2, 3]
    assert set(steps[0]) >= {
        "time",
        "step",
        "total_steps",
        "loss",
        "world_size",
        "metrics",
        "data_s",
        "compute_s",
    }
    assert steps[0]["total_steps"] == 3 and steps[0]["world_size"] == 1
    events = [(ln["event"], ln["step"]) for ln in lines if "event" in ln]
    assert ("checkpoint", 2) in events and ("checkpoint", 3) in events
    assert events[-1] == ("finished", 3) and lines[-1]["metrics"] == {"accuracy": 0.5}
    assert rt.store.complete_steps() == [2, 3]


@pytest.mark.parametrize("how", ["signal", "file"])
def test_notice_checkpoints_and_exits_75(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model, opt, sched = _setup()
    notice_file = tmp_path / "notice"
    progress = tmp_path / "p.jsonl"
    watcher = NoticeWatcher(notice_signal=signal.SIGUSR2, notice_file=notice_file)
    rt = Runtime(
        model,
        opt,
        sched,
        storage=str(tmp_path / "ck"),
        every_steps=100,
        progress_file=str(progress),
        notice=watcher,
    )
    try:
        _train(rt, model, opt, sched, 0, 2)
        if how == "signal":
            os.kill(os.getpid(), signal.SIGUSR2)
        else:
            notice_file.touch()
        with pytest.raises(SystemExit) as exited:
            _train(rt, model, opt, sched, 2, 5)
        assert exited.value.code == PREEMPTED_EXIT_CODE
        assert rt.store.complete_steps() == [3]
        assert _lines(progress)[-1]["event"] == "preempted"
        came = "SIGUSR2" if how == "signal" else f"notice file {notice_file}"
        assert capsys.readouterr().err.splitlines()[-1] == (  # one line that says it all (issue 32)
            f"gpuctl: preemption notice ({came}): checkpoint of step 3 saved; rank 0 exiting 75 to be resumed"
        )
    finally:
        watcher.uninstall()


def test_time_based_checkpoint(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    rt = Runtime(model, opt, sched, storage=str(tmp_path / "ck"), every_seconds=0.0)
    _train(rt, model, opt, sched, 0, 2)
    rt.wait()
    assert rt.store.complete_steps() == [1, 2]
    rt.notice.uninstall()


def test_from_env_reads_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_CHECKPOINT_DIR", str(tmp_path / "env-ck"))
    monkeypatch.setenv("GPUCTL_CHECKPOINT_EVERY_STEPS", "7")
    monkeypatch.setenv("GPUCTL_CHECKPOINT_KEEP", "2")
    monkeypatch.setenv("GPUCTL_PROGRESS_FILE", str(tmp_path / "p.jsonl"))
    model, opt, sched = _setup()
    rt = Runtime.from_env(model, opt, sched)
    assert rt.every_steps == 7 and rt.store.keep == 2 and rt.every_seconds is None
    assert (tmp_path / "env-ck").is_dir()
    rt.notice.uninstall()


def test_parse_signal() -> None:
    assert parse_signal(None) == signal.SIGTERM
    assert parse_signal("usr1") == signal.SIGUSR1
    assert parse_signal("15") == signal.SIGTERM
    with pytest.raises(UserError):
        parse_signal("SIGNOPE")


def test_snapshot_buffers_are_reused_but_each_checkpoint_keeps_its_values(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    rt = Runtime(model, opt, sched, storage=str(tmp_path / "ck"), every_steps=100, keep=5)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    rt.checkpoint(1)
    buffer_ids = {k: id(v) for k, v in rt._buffers.items()}
    _train(rt, model, opt, sched, 1, 2)
    rt.checkpoint(2)
    rt.wait()
    assert all(id(rt._buffers[k]) == i for k, i in buffer_ids.items())  # optimizer state is new
    saved_first = torch.load(tmp_path / "ck" / "step-00000001" / "state.pt", weights_only=True)["model"]
    saved_second = torch.load(tmp_path / "ck" / "step-00000002" / "state.pt", weights_only=True)["model"]
    for name, tensor in first.items():
        assert torch.equal(saved_first[name], tensor)
        assert torch.equal(saved_second[name], model.state_dict()[name])
    assert not all(torch.equal(saved_first[n], saved_second[n]) for n in first)
    rt.notice.uninstall()


class _FailingStorage(LocalStorage):
    def write(self, rel: str, fill: object, *, inject_delay: bool = False) -> tuple[str, int]:
        raise OSError("disk full")


def test_failed_background_write_is_reported_and_training_goes_on(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    progress = tmp_path / "p.jsonl"
    rt = Runtime(
        model,
        opt,
        sched,
        storage=_FailingStorage(tmp_path / "ck"),
        every_steps=1,
        progress_file=str(progress),
    )
    _train(rt, model, opt, sched, 0, 2)
    rt.wait()
    failed = [ln for ln in _lines(progress) if ln.get("event") == "checkpoint_failed"]
    assert [ln["step"] for ln in failed] == [1, 2] and "disk full" in str(failed[0]["error"])
    with pytest.raises(OSError):
        rt.finish()  # the final checkpoint is synchronous: its failure is raised
    rt.notice.uninstall()


def test_runtime_lines_reach_the_shared_stream_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank of a node writes to one stream: a line and its newline written apart (``print`` under
    ``PYTHONUNBUFFERED``) can run two ranks' lines together, so the runtime writes each line at once."""
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", Recorder())
    runtime_module.say("rank 1: notice at step 7")
    assert writes == ["rank 1: notice at step 7\n"]
