"""A training script whose input pipeline ``runtime: {tune: auto}`` can tune: DDP (gloo, CPU) over a
synthetic dataset loaded through the runtime's :class:`StepLoader`.

``--item-ms`` makes each item wait (as reading and decoding from storage does), so the job is
input-bound; ``--compute-ms`` adds a sleep to each micro-batch's compute, standing in for GPU work
(a GPU computes without the CPU, so the loader's workers do not slow it down). Run it alone or under
torchrun (gpuctl does this); with ``GPUCTL_TUNE=auto`` (``runtime: {tune: auto}`` in job.yaml) the
runtime tunes the loader while it trains:

    GPUCTL_TUNE=auto torchrun --standalone --nproc-per-node=2 train.py --steps 60 --item-ms 30
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a gpuctl checkout
from orchestrator import runtime


class SlowItems:
    """``size`` samples of a noisy linear problem; each takes ``item_ms`` to load and is augmented."""

    def __init__(self, size: int, item_ms: float) -> None:
        self.size, self.item_s = size, item_ms / 1000
        self.weights = torch.linspace(-1, 1, 32)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.item_s:
            time.sleep(self.item_s)
        x = torch.sin(torch.arange(32, dtype=torch.float32) * (index + 1))
        x = x + 0.01 * torch.randn(32)  # a random augmentation: seeded per item by the runtime
        return x, (x @ self.weights).unsqueeze(0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--item-ms", type=float, default=30.0, help="load time of one item")
    parser.add_argument("--compute-ms", type=float, default=0.0, help="extra compute per micro-batch")
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0, help="the loader's own num_workers")
    parser.add_argument("--checkpoint-every", type=int, default=1000)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    train(args, distributed)
    gc.collect()  # free the DDP model before its process group (see examples/quickstart/train.py)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def train(args: argparse.Namespace, distributed: bool) -> None:
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    ddp_model: nn.Module = DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rt = runtime.Runtime.from_env(model=ddp_model, optimizer=optimizer, total_steps=args.steps,
                                  every_steps=args.checkpoint_every)  # fmt: skip
    data = SlowItems(4096, args.item_ms)
    sampler = runtime.GlobalBatchSampler(len(data), global_batch=args.global_batch, seed=0)
    settings = runtime.LoaderSettings(num_workers=args.workers)
    loader = runtime.StepLoader(data, sampler, rank=rank, world_size=world, micro_batch=args.micro_batch,
                                settings=settings)  # fmt: skip
    start = rt.resume()
    for batch in rt.batches(loader, start):
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (x, y) in enumerate(batch.micro_batches):
            loss = nn.functional.mse_loss(ddp_model(x), y) * batch.part.loss_weight(i)
            loss.backward()
            total += float(loss.item())
            if args.compute_ms:
                time.sleep(args.compute_ms / 1000)
        optimizer.step()
        rt.step_done(batch.step + 1, loss=total, data_s=batch.data_s,
                     compute_s=time.perf_counter() - began)  # fmt: skip
    rt.finish()


if __name__ == "__main__":
    main()
