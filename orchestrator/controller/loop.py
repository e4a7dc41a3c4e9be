"""The controller process: ticks every unfinished job on an APScheduler interval.

One controller per gpuctl home and backend holds its lock (an exclusive ``flock`` on
``controller.lock`` for the local backend, ``controller-<backend>.lock`` for others). ``gpuctl
submit`` runs one in the foreground when none is running; ``gpuctl controller run`` is the
background form (on a SLURM login node, ``gpuctl controller run --backend slurm``).
The lock dies with the process, so a controller killed with -9 is replaced by simply starting another.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from apscheduler.schedulers.background import BackgroundScheduler

from orchestrator.backends.base import Backend
from orchestrator.controller.driver import Driver
from orchestrator.costs.budgets import load_cost_config
from orchestrator.costs.inputs import read_ledger
from orchestrator.costs.schedule import register_report_job
from orchestrator.errors import GpuctlError
from orchestrator.state.store import JobStore

log = logging.getLogger(__name__)
logging.getLogger("apscheduler").setLevel(
    logging.ERROR
)  # "skipped: max instances" is expected when a tick is slow

TICK_SECONDS = 1.0
KEEP_TICKING_AFTER_END = timedelta(minutes=2)
"""Terminal jobs are still ticked a while, so nodes left running by a crash get stopped."""


class ControllerLock:
    def __init__(self, home: Path, backend: str = "local") -> None:
        self.path = home / ("controller.lock" if backend == "local" else f"controller-{backend}.lock")
        self._fh: IO[str] | None = None

    def acquire(self) -> bool:
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return True

    def held_elsewhere(self) -> bool:
        if self._fh is not None:
            return False
        with open(self.path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class Controller:
    """Ticks jobs of one backend. ``start()`` runs in background threads; ``stop()`` ends them."""

    def __init__(self, store: JobStore, backend: Backend, tick_seconds: float = TICK_SECONDS) -> None:
        self.store = store
        self.driver = Driver(store, backend)
        self.backend = backend
        self.tick_seconds = tick_seconds
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.errors: dict[str, str] = {}
        self.idle = threading.Event()

    def tick_all(self) -> None:
        now = datetime.now(UTC)
        busy = False
        for job in self.store.list_jobs():
            if job.backend != self.backend.name:
                continue
            if job.status.terminal and now - job.updated_at > KEEP_TICKING_AFTER_END:
                continue
            busy = busy or not job.status.terminal
            try:
                self.driver.tick(job.id, now)
                self.errors.pop(job.id, None)
            except GpuctlError as err:  # shown to the user; the next tick tries again
                self.errors[job.id] = err.message
                log.warning("job %s: %s", job.id, err.message)
        if busy:
            self.idle.clear()
        else:
            self.idle.set()

    def start(self) -> None:
        self.scheduler.add_job(
            self.tick_all, "interval", seconds=self.tick_seconds, max_instances=1, coalesce=True,
            next_run_time=datetime.now(UTC), id="reconcile",
        )  # fmt: skip
        self._schedule_reports()
        self.scheduler.start()

    def _schedule_reports(self) -> None:
        """Cost reports on the cron schedule of the controller config (``$GPUCTL_HOME/config.yaml``)."""
        config_file = self.store.home / "config.yaml"
        if config_file.exists():
            register_report_job(
                self.scheduler, load_cost_config(config_file), lambda: read_ledger(self.store)
            )

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)


def spawn_background_controller(home: Path, backend: str) -> int:
    """Start ``gpuctl controller run`` detached from this terminal; returns its PID."""
    log_file = open(home / ("controller.log" if backend == "local" else f"controller-{backend}.log"), "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "controller", "run", "--backend", backend, "--exit-when-idle"],
        env={**os.environ, "GPUCTL_HOME": str(home)}, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log_file.close()
    return proc.pid
