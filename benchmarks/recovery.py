"""Recovery benchmark for the runtime helper; prints a markdown table.

1. Training stall of one runtime checkpoint (copy to CPU memory, write in the background) against a
   plain synchronous ``torch.save`` of the same ~500 MB state (a model and its Adam state).
2. Steps lost per preemption, running examples/quickstart/train.py under torchrun (2 processes):
   with a notice (SIGTERM to the process group, SIGKILL after the grace period), and with no
   notice (SIGKILL mid-interval).
3. Seconds from the notice to training resumed: the notice exit plus a torchrun restart until the
   first new progress line.

    python benchmarks/recovery.py            # about 2 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from orchestrator.contract import read_progress_records  # noqa: E402
from orchestrator.runtime import LocalStorage, Runtime  # noqa: E402

TRAIN = REPO / "examples" / "quickstart" / "train.py"


def big_state(target_mb: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model whose parameters plus Adam's two moments take about ``target_mb`` MB."""
    width = 2048
    layer_mb = width * width * 4 * 3 / 1e6
    layers = max(1, round(target_mb / layer_mb))
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    return model, opt


def state_mb(model: nn.Module) -> float:
    """Parameters plus Adam's exp_avg and exp_avg_sq, float32."""
    return sum(p.numel() for p in model.parameters()) * 4 * 3 / 1e6


def measure_stall(target_mb: int, repeats: int, folder: Path) -> dict[str, float]:
    model, opt = big_state(target_mb)
    rt = Runtime(model, opt, storage=LocalStorage(folder / "runtime"), every_steps=10**9, keep=1)
    stalls, writes, saves, durable = [], [], [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        rt.checkpoint(i + 1)
        stalls.append(rt.last_stall_s)
        rt.wait()
        writes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, folder / "plain.pt")
        saves.append(time.perf_counter() - t0)
        (folder / "plain.pt").unlink()
        t0 = time.perf_counter()
        with (folder / "plain.pt").open("wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        durable.append(time.perf_counter() - t0)
        (folder / "plain.pt").unlink()
    rt.notice.uninstall()
    return {
        "mb": state_mb(model),
        "stall": statistics.median(stalls),
        "write": statistics.median(writes),
        "save": statistics.median(saves),
        "durable": statistics.median(durable),
    }


def _start(work: Path, steps: int, every: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "GPUCTL_CHECKPOINT_DIR": str(work / "ck"),
            "GPUCTL_PROGRESS_FILE": str(work / "progress.jsonl"),
            "PYTHONPATH": str(REPO),
        }
    )
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TRAIN)]
    argv += ["--steps", str(steps), "--checkpoint-every", str(every)]
    log = (work / "log.txt").open("ab")
    return subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=log, start_new_session=True)


def _records(work: Path) -> list[dict[str, object]]:
    return read_progress_records(work / "progress.jsonl")  # skips a line torn by the SIGKILL


def _step_lines(work: Path) -> list[dict[str, object]]:
    return [r for r in _records(work) if "event" not in r]


def _max_step(work: Path) -> int:
    return max((int(r["step"]) for r in _step_lines(work)), default=0)  # type: ignore[call-overload]


def _wait_step(work: Path, proc: subprocess.Popen[bytes], step: int, count_before: int = 0) -> float:
    while True:
        lines = _step_lines(work)[count_before:]
        if lines and max(int(r["step"]) for r in lines) >= step:  # type: ignore[call-overload]
            return time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"training exited early ({proc.returncode}); see {work / 'log.txt'}")
        time.sleep(0.01)


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def preemption_run(
    work: Path, with_notice: bool, steps: int, every: int, at: int, grace: float
) -> dict[str, float]:
    """Interrupt at step ``at``, restart, and measure lost steps and time to resumed training."""
    work.mkdir(parents=True)
    proc = _start(work, steps, every)
    _wait_step(work, proc, at)
    noticed = time.monotonic()
    if with_notice:
        os.killpg(proc.pid, signal.SIGTERM)
        _stop(proc, grace)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stopped = time.monotonic()
    done_before = _max_step(work)
    count_before = len(_step_lines(work))
    restart = _start(work, steps, every)
    resumed_lines: list[int] = []
    while not resumed_lines:
        resumed_lines = [int(r["step"]) for r in _records(work) if r.get("event") == "resumed"]  # type: ignore[call-overload]
        if restart.poll() is not None:
            raise RuntimeError(f"restart exited early; see {work / 'log.txt'}")
        time.sleep(0.01)
    first_new = _wait_step(work, restart, resumed_lines[0] + 1, count_before)
    os.killpg(restart.pid, signal.SIGKILL)
    restart.wait()
    return {
        "lost": done_before - resumed_lines[0],
        "stop_s": stopped - noticed,
        "restart_s": first_new - stopped,
        "total_s": first_new - noticed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--state-mb", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every", type=int, default=20, help="checkpoint interval (steps) of the quickstart")
    parser.add_argument("--grace", type=float, default=10.0, help="notice grace period (s)")
    parser.add_argument("--skip-preemption", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as tmp:
        folder = Path(tmp)
        s = measure_stall(args.state_mb, args.repeats, folder)
        ratio = s["stall"] / s["save"]
        rows.append(("state size (model + Adam)", f"{s['mb']:.0f} MB", ""))
        rows.append(("plain torch.save (training stalls)", f"{s['save']:.2f} s", f"median of {args.repeats}"))
        rows.append(("torch.save + fsync (durable, stalls)", f"{s['durable']:.2f} s", ""))
        rows.append(
            (
                "runtime checkpoint: training stall",
                f"{s['stall']:.3f} s",
                f"ratio to torch.save {ratio:.2f} (aim <= 0.2)",
            )
        )
        rows.append(
            ("runtime checkpoint: background write", f"{s['write']:.2f} s", "fsync + rename + manifest")
        )
        if not args.skip_preemption:
            at = 3 * args.every + args.every // 2
            steps = 6 * args.every
            notice = preemption_run(folder / "notice", True, steps, args.every, at, args.grace)
            kill = preemption_run(folder / "kill", False, steps, args.every, at, args.grace)
            rows.append((f"steps lost, notice (grace {args.grace:.0f} s)", f"{notice['lost']:.0f}", "aim 0"))
            rows.append(
                ("steps lost, no notice (SIGKILL)", f"{kill['lost']:.0f}", f"aim <= interval ({args.every})")
            )
            rows.append(
                ("notice -> checkpointed and exited", f"{notice['stop_s']:.1f} s", "2 ranks, torchrun")
            )
            rows.append(
                ("restart -> first new step", f"{notice['restart_s']:.1f} s", "torchrun + import + load")
            )
            rows.append(("notice -> training resumed", f"{notice['total_s']:.1f} s", ""))
    print("| measure | value | note |")
    print("|---|---|---|")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")


if __name__ == "__main__":
    main()
