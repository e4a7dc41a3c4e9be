"""Step time before and after ``runtime: {tune: auto}`` for three workloads of examples/tune/train.py.

Each workload runs once under torchrun (two ranks, gloo, CPU) with GPUCTL_TUNE=auto. "before" is the
mean wall time per step of the baseline's timed steps (the script's own loader settings), "after" that
of the steps run after tuning ended (the settings kept); both come from the progress records' times.
The predicted speedup is the bound from the baseline's measured data-wait share w, 1/(1-w) (steps that
no longer wait on data at all); the realised one is before/after.

    python benchmarks/runtime_tune.py [--nproc 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.contract import ProgressRecord, read_progress_records
from orchestrator.runtime.tune import TuneConfig

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "tune" / "train.py"
WORKLOADS = {
    "input-bound (30 ms/item, batch 16)": ["--steps", "100", "--item-ms", "30"],
    "compute-bound (60 ms compute/step)": ["--steps", "60", "--item-ms", "0", "--compute-ms", "60"],
    "small batch (10 ms/item, batch 4)": ["--steps", "150", "--item-ms", "10", "--global-batch", "4",
                                          "--micro-batch", "2", "--compute-ms", "10"],
}  # fmt: skip


def run(args: list[str], nproc: int, folder: Path) -> list[ProgressRecord]:
    progress = folder / "progress.jsonl"
    env = {**os.environ, "GPUCTL_TUNE": "auto", "GPUCTL_PROGRESS_FILE": str(progress),
           "GPUCTL_CHECKPOINT_DIR": str(folder / "checkpoints"), "PYTHONPATH": str(REPO)}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(TRAIN), *args]  # fmt: skip
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=900)
    return read_progress_records(progress)


def mean_step_s(records: list[ProgressRecord], first: int, last: int) -> float:
    times = {r.step: r.time for r in records if r.is_step and r.time is not None}
    return statistics.fmean((times[s] - times[s - 1]).total_seconds() for s in range(first, last + 1))


def row(name: str, records: list[ProgressRecord]) -> str:
    config = TuneConfig()
    ended = next(r for r in records if r.event in ("tuned", "tune_unchanged"))
    wait = float(ended.fields["data_wait_share"])
    baseline_first = config.warmup_steps + 1
    before = mean_step_s(records, max(2, baseline_first), config.warmup_steps + config.measure_steps)
    last = max(r.step for r in records if r.is_step and r.step is not None)
    assert ended.step is not None
    after = mean_step_s(records, ended.step + config.warmup_steps + 1, last)
    kept = ended.tune.settings if ended.tune else "unchanged (" + str(ended.fields.get("reason")) + ")"
    settings = kept if isinstance(kept, str) else ", ".join(f"{k}={v}" for k, v in kept.items())
    return (f"| {name} | {before * 1000:.0f} ms | {after * 1000:.0f} ms | {wait:.0%} | "
            f"{1 / max(1e-9, 1 - wait):.2f}x | {before / after:.2f}x | {settings} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks per run")
    args = parser.parse_args()
    print(
        "| workload | step before | step after | data wait | predicted (1/(1-w)) | realised | settings kept |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, extra in WORKLOADS.items():
        with tempfile.TemporaryDirectory() as folder:
            print(row(name, run(extra, args.nproc, Path(folder))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
