"""Exact resume under real torchrun (2 processes, gloo): notice exit and a kill mid-checkpoint.

An uninterrupted run and a run that is interrupted twice (SIGTERM notice to the process group,
then SIGKILL while a checkpoint is being written) must end with bit-identical parameters and
optimizer state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.contract import PREEMPTED_EXIT_CODE, read_progress_records
from orchestrator.runtime import SLOW_WRITE_ENV, CheckpointStore, LocalStorage

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "quickstart" / "train.py"
STEPS = 80
EVERY = 10


def _start(workdir: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "GPUCTL_CHECKPOINT_DIR": str(workdir / "ck"),
            "GPUCTL_PROGRESS_FILE": str(workdir / "progress.jsonl"),
            "GPUCTL_CHECKPOINT_KEEP": "3",
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "PYTHONFAULTHANDLER": "1",  # a stuck run prints its stacks on SIGABRT (_finish)
        }
    )
    env.update(extra_env or {})
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    argv += [str(TRAIN), "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--width", "768"]
    log = (workdir / "log.txt").open("ab")
    return subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=log, start_new_session=True)


def _progress(workdir: Path) -> list[dict[str, Any]]:
    return [dict(r.fields) for r in read_progress_records(workdir / "progress.jsonl")]


def _last_step(workdir: Path) -> int:
    steps = [int(r["step"]) for r in _progress(workdir) if "event" not in r]
    return max(steps, default=0)


def _wait_for(predicate: object, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        if proc.poll() is not None:
            raise AssertionError(f"training exited early with {proc.returncode}")
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (torchrun's workers run in sessions of their own)."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        child, parent = (int(field) for field in line.split())
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# 30 s alone on 2 cores, 420 s allowed for a loaded machine; a run that outlasted that in CI was a
# worker hung at exit (docs/runtime.md, "End of a DDP run"), which the stacks printed here showed
def _finish(proc: subprocess.Popen[bytes], workdir: Path, timeout: float = 420) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Say where it was: the machine's busiest processes, and every Python stack of the run
        # (PYTHONFAULTHANDLER makes SIGABRT print them into the run's log).
        busiest = subprocess.run(
            ["ps", "-eo", "pid,ppid,etimes,pcpu,stat,args", "--sort=-pcpu"], capture_output=True, text=True
        ).stdout.splitlines()[:15]
        run_pids = [proc.pid, *_descendants(proc.pid)]
        for pid in run_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
        deadline = time.monotonic() + 10  # each process prints its stacks, then aborts
        while time.monotonic() < deadline and (proc.poll() is None or any(map(_alive, run_pids[1:]))):
            time.sleep(0.1)
        for pid in [proc.pid, *_descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(
            f"training did not end within {timeout:.0f} s\nbusiest processes:\n"
            + "\n".join(line[:200] for line in busiest)
            + "\nthe run's log (end):\n"
            + (workdir / "log.txt").read_text(errors="replace")[-12000:]
        ) from None


def _final_state(workdir: Path) -> dict[str, object]:
    found = CheckpointStore(LocalStorage(workdir / "ck")).load_latest()
    assert found is not None and found[0] == STEPS
    return found[1]


def _assert_identical(a: object, b: object, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_identical(x, y, f"{where}[{i}]")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_interrupted_twice_ends_bit_identical(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    assert _finish(_start(reference), reference) == 0

    run = tmp_path / "interrupted"
    run.mkdir()
    # 1. preemption notice to the whole process group: checkpoint at the step boundary, exit 75
    proc = _start(run)
    _wait_for(lambda: _last_step(run) >= 23, 90, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    _finish(proc, run)
    events = [r for r in _progress(run) if r.get("event") == "preempted"]
    assert len(events) == 1, (run / "log.txt").read_text()[-3000:]
    noticed = int(events[0]["step"])
    assert 23 <= noticed < STEPS
    log = (run / "log.txt").read_text()
    for rank in (0, 1):
        assert f"checkpoint of step {noticed} saved; rank {rank} exiting 75 to be resumed" in log
    assert PREEMPTED_EXIT_CODE == 75
    store = CheckpointStore(LocalStorage(run / "ck"))
    assert store.complete_steps()[-1] == noticed

    # 2. resume, then SIGKILL while the next checkpoint is still in its hidden work folder
    proc = _start(run, {SLOW_WRITE_ENV: "60"})
    torn_step = (noticed // EVERY + 1) * EVERY
    torn_dir = run / "ck" / f"step-{torn_step:08d}"
    work_dirs = f".tmp-step-{torn_step:08d}-*"
    _wait_for(lambda: any((p / "state.pt").is_file() for p in (run / "ck").glob(work_dirs)), 90, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun's group; its workers have their own sessions
    proc.wait()
    lines_after_kill = len(_progress(run))
    time.sleep(1.5)  # the runtime makes workers die with their agent: nothing more is written
    assert len(_progress(run)) == lines_after_kill
    assert not torn_dir.exists()
    assert store.complete_steps()[-1] == noticed

    # 3. resume from the notice checkpoint (the torn one is ignored) and run to the end
    assert _finish(_start(run), run) == 0
    resumed = [int(r["step"]) for r in _progress(run) if r.get("event") == "resumed"]
    assert resumed == [noticed, noticed]
    finished = [r for r in _progress(run) if r.get("event") == "finished"]
    assert len(finished) == 1 and finished[0]["metrics"]["accuracy"] > 0.5

    want, got = _final_state(reference), _final_state(run)
    _assert_identical(want["model"], got["model"], "model")
    _assert_identical(want["optimizer"], got["optimizer"], "optimizer")
    assert want["scheduler"] == got["scheduler"]
