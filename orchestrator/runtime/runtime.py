"""The object a training script uses: resume, report each step, checkpoint, obey preemption notices."""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from orchestrator.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_EVERY_SECONDS,
    ENV_CHECKPOINT_EVERY_STEPS,
    ENV_CHECKPOINT_KEEP,
    ENV_PROGRESS_FILE,
    ENV_TUNE,
    PREEMPTED_EXIT_CODE,
)
from orchestrator.errors import UserError
from orchestrator.runtime.checkpoint import CheckpointStore, check_plain
from orchestrator.runtime.lifetime import die_with_parent, under_torchrun
from orchestrator.runtime.loader import StepBatch, StepLoader
from orchestrator.runtime.notice import NoticeWatcher
from orchestrator.runtime.progress import ProgressFile
from orchestrator.runtime.rng import capture_rng, restore_rng
from orchestrator.runtime.storage import Storage, open_storage
from orchestrator.runtime.tune import TuneConfig, timed_steps, tuned_steps

DEFAULT_CHECKPOINT_DIR = "./checkpoints"
DEFAULT_EVERY_SECONDS = 600.0


BufferCache = dict[tuple[Any, ...], torch.Tensor]


def clone_to_cpu(value: Any, buffers: BufferCache | None = None, path: tuple[Any, ...] = ()) -> Any:
    """A deep copy of nested dicts/lists/tuples whose tensors are copied to CPU memory.

    With ``buffers``, tensors are copied into CPU buffers kept from the previous call (same path,
    shape and dtype), which avoids allocating and page-faulting the whole state every checkpoint;
    the caller must not reuse the buffers while an earlier copy is still being written.
    """
    if isinstance(value, torch.Tensor):
        if buffers is None:
            return value.detach().to("cpu", copy=True)
        buf = buffers.get(path)
        if buf is None or buf.shape != value.shape or buf.dtype != value.dtype:
            buf = torch.empty(value.shape, dtype=value.dtype, pin_memory=value.is_cuda)
            buffers[path] = buf
        buf.copy_(value.detach())
        return buf
    if isinstance(value, dict):
        return {k: clone_to_cpu(v, buffers, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [clone_to_cpu(v, buffers, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(clone_to_cpu(v, buffers, (*path, i)) for i, v in enumerate(value))
    return copy.deepcopy(value)


def say(line: str) -> None:
    """``line`` on stderr in ONE write: every rank of a node shares the stream, and ``print`` writes the
    text and its newline separately where Python runs unbuffered (``PYTHONUNBUFFERED``), so two ranks'
    lines could run together on one line."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _env_float(name: str) -> float | None:
    text = os.environ.get(name)
    return float(text) if text else None


def notice_line(how: str, step: int, rank: int) -> str:
    """The one line a rank prints when it leaves for a preemption notice (``how``: what brought it)."""
    return (
        f"gpuctl: preemption notice ({how}): checkpoint of step {step} saved; "
        f"rank {rank} exiting {PREEMPTED_EXIT_CODE} to be resumed"
    )


class Runtime:
    """Checkpoint/resume and progress reporting for one training process (one rank).

    Only rank 0 writes checkpoints and the progress file; every rank's RNG state is gathered into
    rank 0's checkpoint. Collective calls (one small all_reduce per step, an all_gather per
    checkpoint) assume every rank calls :meth:`step_done` for the same steps.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        *,
        storage: Storage | str | None = None,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep: int = 3,
        progress_file: str | None = None,
        total_steps: int | None = None,
        notice: NoticeWatcher | None = None,
        async_write: bool = True,
        tune: str = "off",
        tune_config: TuneConfig | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        if storage is None or isinstance(storage, str):
            storage = open_storage(storage or DEFAULT_CHECKPOINT_DIR)
        self.store = CheckpointStore(storage, keep=keep)
        if every_steps is None and every_seconds is None:
            every_seconds = DEFAULT_EVERY_SECONDS
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.total_steps = total_steps
        self.async_write = async_write
        if tune not in ("off", "auto"):
            raise UserError(
                f"tune must be off or auto, not {tune!r}", "set runtime.tune in job.yaml to off or auto"
            )
        self.tune = tune
        """``auto``: :meth:`batches` tunes the loader's settings (:mod:`orchestrator.runtime.tune`)."""
        self.tune_config = tune_config or TuneConfig()
        self.extra: dict[str, Any] = {}
        """User state saved in every checkpoint and restored by resume(): tensors and plain values
        only (dict, list, tuple, str, int, float, bool, None); anything else is refused."""
        self.rank = dist.get_rank() if _distributed() else int(os.environ.get("RANK", "0"))
        self.world_size = dist.get_world_size() if _distributed() else 1
        self.progress = ProgressFile(progress_file if self.rank == 0 else None)
        self.notice = notice or NoticeWatcher()
        self.notice.install()
        if under_torchrun():
            die_with_parent()
        self.last_checkpoint_step: int | None = None
        self.last_stall_s = 0.0
        """Seconds the last checkpoint held up the training loop (snapshot; plus the write if sync)."""
        self._last_checkpoint_time = time.monotonic()
        self._last_step = 0
        self._writer: threading.Thread | None = None
        self._buffers: BufferCache = {}
        self._last_written_step: int | None = None

    @classmethod
    def from_env(
        cls,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        **overrides: Any,
    ) -> Runtime:
        """Configure from the GPUCTL_* variables of :mod:`orchestrator.contract`; keywords win."""
        steps = os.environ.get(ENV_CHECKPOINT_EVERY_STEPS)
        settings: dict[str, Any] = {
            "storage": os.environ.get(ENV_CHECKPOINT_DIR) or None,
            "every_steps": int(steps) if steps else None,
            "every_seconds": _env_float(ENV_CHECKPOINT_EVERY_SECONDS),
            "keep": int(os.environ.get(ENV_CHECKPOINT_KEEP) or 3),
            "progress_file": os.environ.get(ENV_PROGRESS_FILE) or None,
            "tune": os.environ.get(ENV_TUNE) or "off",
        }
        settings.update(overrides)
        return cls(model, optimizer, scheduler, **settings)

    @property
    def _module(self) -> torch.nn.Module:
        inner = getattr(self.model, "module", None)
        return inner if isinstance(inner, torch.nn.Module) else self.model

    # ---- resume -------------------------------------------------------------------------------

    def resume(self) -> int:
        """Load the newest complete checkpoint (model, optimizer, scheduler, RNG, extra).

        Returns the step to continue from: 0 when there is no checkpoint."""
        found = self.store.load_latest()
        step = found[0] if found else 0
        if _distributed():
            steps: list[Any] = [None] * self.world_size
            dist.all_gather_object(steps, step)
            if len(set(steps)) != 1:
                raise UserError(
                    f"ranks found different newest checkpoints: {steps}",
                    "give every node the same checkpoint location (shared storage or s3://)",
                )
        if found is None:
            return 0
        state = found[1]
        self._module.load_state_dict(state["model"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        rngs = state["rng"]
        restore_rng(rngs[self.rank % len(rngs)])
        self.extra.update(state.get("extra", {}))
        self.last_checkpoint_step = step
        self._last_written_step = step
        self._last_step = step
        self._last_checkpoint_time = time.monotonic()
        self.progress.event("resumed", step, world_size=self.world_size, saved_world_size=len(rngs))
        return step

    # ---- each step ----------------------------------------------------------------------------

    def step_done(
        self,
        step: int,
        loss: float | torch.Tensor | None = None,
        data_s: float | None = None,
        compute_s: float | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """Call after optimizer step number ``step`` (1-based: the count of steps done) on every rank."""
        self._last_step = step
        if isinstance(loss, torch.Tensor):
            loss = float(loss.detach().item())
        self.progress.step(step, self.total_steps, loss, self.world_size, metrics or {}, data_s, compute_s)
        time_due = (
            self.every_seconds is not None
            and time.monotonic() - self._last_checkpoint_time >= self.every_seconds
        )
        notice, time_due = self._agree(self.notice.pending(), time_due)
        if notice:
            self._exit_for_notice(step)
        steps_due = self.every_steps is not None and step % self.every_steps == 0
        if (steps_due or time_due) and step != self.last_checkpoint_step:
            self.checkpoint(step, sync=not self.async_write)

    def batches(self, loader: StepLoader, start: int, stop: int | None = None) -> Iterator[StepBatch]:
        """The batches of steps ``start..stop-1`` (``stop`` defaults to ``total_steps``), each with the
        seconds the loop waited for it (``data_s``); with ``tune="auto"`` the loader's settings are tuned
        on the way. Every rank must consume the same steps (tuning agrees across ranks)."""
        if stop is None:
            if self.total_steps is None:
                raise UserError("batches() needs a last step", "pass stop=... or total_steps= to the Runtime")
            stop = self.total_steps
        if self.tune != "auto":
            return timed_steps(loader, start, stop)
        return tuned_steps(loader, start, stop, config=self.tune_config, agree=self._agree_max,
                           report=lambda event, step, fields: self.progress.event(event, step, **fields))  # fmt: skip

    def _agree_max(self, values: list[float]) -> list[float]:
        """Each value's maximum over the ranks (collective)."""
        if not _distributed() or self.world_size == 1:
            return values
        found = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(found, op=dist.ReduceOp.MAX)
        return [float(v) for v in found.tolist()]

    def _agree(self, notice: bool, time_due: bool) -> tuple[bool, bool]:
        """Any rank's notice counts for all; rank 0's clock decides time-based checkpoints."""
        if not _distributed() or self.world_size == 1:
            return notice, time_due
        flags = torch.tensor(
            [int(notice), int(time_due and self.rank == 0)],
            dtype=torch.int32,
            device=self._collective_device(),
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0].item()), bool(flags[1].item())

    @staticmethod
    def _collective_device() -> str:
        return "cuda" if dist.get_backend() == "nccl" else "cpu"

    # ---- checkpoints ----------------------------------------------------------------------------

    def snapshot(self, step: int) -> dict[str, Any]:
        """The full training state copied to CPU memory (collective: every rank must call it)."""
        rng = capture_rng()
        rngs: list[Any] = [rng]
        if _distributed():
            rngs = [None] * self.world_size
            dist.all_gather_object(rngs, rng)
        return {
            "step": step,
            "model": clone_to_cpu(self._module.state_dict(), self._buffers, ("model",)),
            "optimizer": (
                clone_to_cpu(self.optimizer.state_dict(), self._buffers, ("optimizer",))
                if self.optimizer
                else None
            ),
            "scheduler": copy.deepcopy(self.scheduler.state_dict()) if self.scheduler else None,
            "rng": rngs,
            "extra": clone_to_cpu(self.extra),
        }

    def checkpoint(self, step: int, sync: bool = False) -> None:
        """Checkpoint ``step`` on every rank (collective); rank 0 writes, in the background unless sync."""
        self.wait()
        started = time.perf_counter()
        state = self.snapshot(step)
        check_plain(state)  # on every rank, so that all of them stop together
        self.last_checkpoint_step = step
        self._last_checkpoint_time = time.monotonic()
        if self.rank == 0:
            if sync:
                self._write(step, state, raise_errors=True)
            else:
                self._writer = threading.Thread(
                    target=self._write, args=(step, state), name=f"gpuctl-checkpoint-{step}", daemon=True
                )
                self._writer.start()
        if sync and _distributed():
            dist.barrier()
        self.last_stall_s = time.perf_counter() - started

    def _write(self, step: int, state: dict[str, Any], raise_errors: bool = False) -> None:
        try:
            self.store.save(step, state, meta={"world_size": self.world_size})
        except Exception as exc:
            self.progress.event("checkpoint_failed", step, error=str(exc))
            say(f"gpuctl runtime: checkpoint of step {step} failed: {exc}")
            if raise_errors:
                raise
            return
        self._last_written_step = step
        self.progress.event("checkpoint", step)

    def wait(self) -> None:
        """Wait for a background checkpoint write to finish."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    # ---- the end ----------------------------------------------------------------------------

    def _needs_final_checkpoint(self, step: int) -> bool:
        """True unless ``step`` is already safely written (rank 0 knows; all ranks agree)."""
        self.wait()
        missing = self.last_checkpoint_step != step or (self.rank == 0 and self._last_written_step != step)
        if _distributed() and self.world_size > 1:
            flag = torch.tensor([int(missing)], dtype=torch.int32, device=self._collective_device())
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            missing = bool(flag.item())
        return missing

    def _exit_for_notice(self, step: int) -> None:
        if self._needs_final_checkpoint(step):
            self.checkpoint(step, sync=True)
        elif _distributed():
            dist.barrier()
        self.progress.event("preempted", step)
        sys.stdout.flush()
        say(notice_line(self.notice.describe(), step, self.rank))
        raise SystemExit(PREEMPTED_EXIT_CODE)

    def finish(self, metrics: dict[str, Any] | None = None, step: int | None = None) -> None:
        """Write the final checkpoint (if not already there) and the ``finished`` progress line."""
        step = self._last_step if step is None else step
        if self._needs_final_checkpoint(step):
            self.checkpoint(step, sync=True)
        self.progress.event("finished", step, metrics=metrics or {})
        self.notice.uninstall()
