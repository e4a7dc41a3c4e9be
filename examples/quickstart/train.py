"""Quickstart: an MLP on scikit-learn's digits, trained with DDP (gloo, CPU) under torchrun.

It uses gpuctl's runtime helper for checkpoints, exact resume, the global batch and preemption
notices. Run it alone (``python train.py``) or under torchrun (gpuctl does this):

    torchrun --standalone --nproc-per-node=2 train.py --steps 300
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a gpuctl checkout
from orchestrator import runtime

TARGET_ACCURACY = 0.95


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--checkpoint-every", type=int, default=None, help="steps (default: GPUCTL env)")
    parser.add_argument("--global-batch", type=int, default=None, help="default: GPUCTL_GLOBAL_BATCH or 64")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=2048, help="hidden layer width")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_model(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, width),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 10),
    )


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    distributed = "WORLD_SIZE" in os.environ
    if not distributed:
        train(args, distributed=False)
        return
    dist.init_process_group("gloo")
    try:
        train(args, distributed=True)
        code = 0
    except SystemExit as stop:  # a preemption notice: every rank saved the checkpoint and stops
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    # Every reference to the DDP model (the runtime holds one too) died with train()'s frame: a DDP
    # model freed after its process group was destroyed can hang the process at exit.
    gc.collect()
    if code == 0:
        dist.barrier()
    dist.destroy_process_group()
    sys.exit(code)


def train(args: argparse.Namespace, distributed: bool) -> None:
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    train_idx, test_idx = train_test_split(
        np.arange(len(y)), test_size=0.2, random_state=0, stratify=digits.target
    )
    x_train, y_train = x[train_idx], y[train_idx]
    x_test, y_test = x[test_idx], y[test_idx]

    model = make_model(args.width)
    ddp_model: nn.Module = DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    extra = {} if args.checkpoint_every is None else {"every_steps": args.checkpoint_every}
    rt = runtime.Runtime.from_env(
        model=ddp_model, optimizer=optimizer, scheduler=scheduler, total_steps=args.steps, **extra
    )
    global_batch = args.global_batch or int(os.environ.get("GPUCTL_GLOBAL_BATCH") or 64)
    sampler = runtime.GlobalBatchSampler(len(y_train), global_batch=global_batch, seed=args.seed)

    start = rt.resume()
    if rank == 0:
        print(f"world size {world}, starting at step {start} of {args.steps}", flush=True)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(start, args.steps):
        t0 = time.perf_counter()
        part = sampler.for_rank(step, rank, world, args.micro_batch)
        micro = [(x_train[idx], y_train[idx]) for idx in part.micro_batches]
        t1 = time.perf_counter()
        ddp_model.train()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (xb, yb) in enumerate(micro):
            last = i == len(micro) - 1
            sync = ddp_model.no_sync() if distributed and not last else _null()
            with sync:
                loss = loss_fn(ddp_model(xb), yb) * part.loss_weight(i)
                loss.backward()
            total += float(loss.item()) / world
        optimizer.step()
        scheduler.step()
        t2 = time.perf_counter()
        batch = {"global_batch": part.global_batch, "accumulation_steps": part.accumulation_steps}
        rt.step_done(step + 1, loss=total, data_s=t1 - t0, compute_s=t2 - t1, metrics=batch)

    model.eval()
    with torch.no_grad():
        correct = int((model(x_test).argmax(1) == y_test).sum())
    accuracy = correct / len(y_test)
    if rank == 0:
        verdict = "reached" if accuracy >= TARGET_ACCURACY else "did NOT reach"
        print(f"test accuracy {accuracy:.4f} ({verdict} the target {TARGET_ACCURACY})", flush=True)
    rt.finish(metrics={"accuracy": accuracy})


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
