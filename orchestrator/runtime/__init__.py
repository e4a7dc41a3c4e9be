"""The training-side helper: checkpoint/resume, data position, progress lines and preemption notices.

A training script (run under torchrun) does::

    from orchestrator import runtime
    rt = runtime.Runtime.from_env(model=model, optimizer=opt, scheduler=sched, total_steps=N)
    start = rt.resume()
    sampler = runtime.GlobalBatchSampler(len(train_set), seed=0)
    for step in range(start, N):
        batch = sampler.for_rank(step, rank, world_size, micro_batch=32)
        ...
        rt.step_done(step + 1, loss=loss, data_s=..., compute_s=...)
    rt.finish(metrics={"accuracy": acc})

or lets the runtime load the batches (``runtime: {tune: auto}`` then tunes the loader)::

    loader = runtime.StepLoader(train_set, sampler, rank=rank, world_size=world_size, micro_batch=32)
    for batch in rt.batches(loader, start):
        ...  # batch.part (RankBatch), batch.micro_batches (collated), batch.data_s
        rt.step_done(batch.step + 1, loss=loss, data_s=batch.data_s, compute_s=...)

Imports only torch, numpy, the standard library, :mod:`orchestrator.contract` and
:mod:`orchestrator.errors` (boto3 lazily, for ``s3://`` checkpoints).
"""

from orchestrator import extras

extras.check("torch", "the training runtime (orchestrator.runtime)")  # one clear line, not a traceback

from orchestrator.runtime.checkpoint import CheckpointStore, Manifest, UnsafeCheckpointError  # noqa: E402
from orchestrator.runtime.data import GlobalBatchSampler, RankBatch  # noqa: E402
from orchestrator.runtime.loader import LoaderSettings, StepBatch, StepLoader  # noqa: E402
from orchestrator.runtime.notice import NoticeWatcher, parse_signal  # noqa: E402
from orchestrator.runtime.progress import ProgressFile  # noqa: E402
from orchestrator.runtime.rng import capture_rng, restore_rng  # noqa: E402
from orchestrator.runtime.runtime import Runtime, clone_to_cpu  # noqa: E402
from orchestrator.runtime.storage import SLOW_WRITE_ENV, LocalStorage, S3Storage, Storage, open_storage  # noqa: E402
from orchestrator.runtime.tune import TuneConfig  # noqa: E402

__all__ = [
    "SLOW_WRITE_ENV",
    "CheckpointStore",
    "GlobalBatchSampler",
    "LoaderSettings",
    "LocalStorage",
    "Manifest",
    "NoticeWatcher",
    "ProgressFile",
    "RankBatch",
    "Runtime",
    "S3Storage",
    "StepBatch",
    "StepLoader",
    "Storage",
    "TuneConfig",
    "UnsafeCheckpointError",
    "capture_rng",
    "clone_to_cpu",
    "open_storage",
    "parse_signal",
    "restore_rng",
]
