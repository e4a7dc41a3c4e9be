"""A tiny DDP (gloo) training script for the SLURM tests: checkpoints, resumes, exits 75 on a notice.

Rank 0 appends ``step N attempt A`` to ``$GPUCTL_CHECKPOINT_DIR/steps.log`` after each step, so a test
can count steps recomputed after an interruption. ``--echo-env NAME`` and ``--echo-arg VALUE`` write
what arrived to ``echo.json`` (the shell injection test).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist

PREEMPTED_EXIT_CODE = 75
notice = False


def now() -> str:
    return datetime.now(UTC).isoformat()


def on_notice(signum: int, frame: object) -> None:
    global notice
    notice = True


def main() -> int:
    code = train()
    # The DDP model died with train()'s frame: one freed after its process group is destroyed can
    # hang the process at exit (and hold torchrun, and the SLURM step, with it).
    gc.collect()
    dist.destroy_process_group()
    return code


def train() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--echo-env", default=None)
    parser.add_argument("--echo-arg", default=None)
    parser.add_argument("--seed", type=int, default=None, help="same seed and world size: same parameters")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_notice)
    signal.signal(signal.SIGUSR1, on_notice)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt_dir = Path(os.environ["GPUCTL_CHECKPOINT_DIR"])
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    every = int(os.environ.get("GPUCTL_CHECKPOINT_EVERY_STEPS", "5"))
    attempt = os.environ.get("GPUCTL_ATTEMPT", "?")
    ckpt = ckpt_dir / "ckpt.pt"
    if args.seed is not None:
        torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        step = state["step"]
    if rank == 0 and (args.echo_env or args.echo_arg):
        echo = {"env": os.environ.get(args.echo_env or "", None), "arg": args.echo_arg}
        (ckpt_dir / "echo.json").write_text(json.dumps(echo))
    progress = os.environ.get("GPUCTL_PROGRESS_FILE")

    def save() -> None:
        if rank == 0:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.module.state_dict(), "step": step}, tmp)
            tmp.replace(ckpt)

    while step < args.steps:
        stop = torch.tensor([1.0 if notice else 0.0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0:
            save()
            dist.barrier()
            sys.stdout.write(
                f"rank {rank}: notice at step {step}, checkpoint saved\n"
            )  # one write: ranks share
            sys.stdout.flush()  # the stream, and print writes the newline apart when Python runs unbuffered
            return PREEMPTED_EXIT_CODE
        if args.seed is not None:  # each step's data from the seed and the step: a resumed run draws the same
            torch.manual_seed(args.seed + step)
        x = torch.randn(8, 4)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        time.sleep(args.step_seconds)
        if rank == 0:
            with open(ckpt_dir / "steps.log", "a") as fh:
                fh.write(f"step {step} attempt {attempt} world {dist.get_world_size()}\n")
            if progress:
                with open(progress, "a") as fh:
                    line = {"time": now(), "step": step, "total_steps": args.steps, "loss": loss.item()}
                    fh.write(json.dumps(line) + "\n")
        if step % every == 0:
            save()
    if rank == 0 and progress:
        with open(progress, "a") as fh:
            line = {"time": now(), "step": step, "total_steps": args.steps, "event": "finished"}
            fh.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
