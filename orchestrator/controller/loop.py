"""The controller process: ticks every unfinished job on an APScheduler interval.

One controller per gpuctl home and backend holds its lock (an exclusive ``flock`` on
``controller.lock`` for the local backend, ``controller-<backend>.lock`` for others). ``gpuctl
submit`` runs one in the foreground when none is running; ``gpuctl controller run`` is the
background form (on a SLURM login node, ``gpuctl controller run --backend slurm``).
The lock dies with the process, so a controller killed with -9 is replaced by simply starting another.
On a shared database (PostgreSQL) any number of controllers run, on one machine or several: each
ticks only the jobs whose lease it holds (:mod:`orchestrator.controller.leases`), and takes over the
jobs of one that died once their leases run out.
:func:`controller_running` asks whether a live controller holds it (what ``gpuctl list`` and
``status`` show as ``managed``). An attached ``submit`` interrupted with Ctrl-C hands its lock, held,
to the background controller it starts (:func:`spawn_background_controller` with ``lock``): the
child inherits the locked file, so no moment passes in which no controller holds it.

Each job's tick is isolated (:meth:`Controller.tick_job`): whatever one job's data does, the other
jobs are still reconciled. An error in the job itself (a stored spec that no longer validates, an
unexpected exception: a gpuctl bug or data it did not expect) is *permanent*: the job ends FAILED
(``invalid_spec`` or ``internal_error``) with an event. A fault around it (a backend command or the
cluster manager failing, a busy database, a missing tool: :class:`~orchestrator.errors.GpuctlError`,
``OSError``) is *transient*: the job stays as it is and the next tick tries again; the error is
logged and recorded as one event until it changes or clears, never once per tick. A job whose rows in
the store are damaged (:class:`~orchestrator.state.row_check.DamagedRow`: a status, time or JSON
gpuctl cannot read) is skipped the same way: reported once, left as it is until someone repairs the
row, while every other job ticks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Connection

from orchestrator.backends.base import Backend
from orchestrator.backends.secrets import reference_value
from orchestrator.controller.digest import register_digest_job
from orchestrator.controller.driver import Driver, RoundRead
from orchestrator.controller.host import TICK_SECONDS, permanent_failure
from orchestrator.controller.leases import LeaseKeeper, LeaseLost
from orchestrator.costs.budgets import load_cost_config
from orchestrator.costs.inputs import read_ledger
from orchestrator.costs.schedule import register_report_job
from orchestrator.errors import GpuctlError, SpecError
from orchestrator.home import PRIVATE_FILE_MODE, open_regular_file
from orchestrator.notify import DeliveryWorker, Outbox, Pending, RetryPolicy, Sender, load_notify_config
from orchestrator.state.leases import LEASE_S
from orchestrator.state.status import FailureReason
from orchestrator.state.store import JobStore, StoreWrites

log = logging.getLogger(__name__)
logging.getLogger("apscheduler").setLevel(
    logging.ERROR
)  # "skipped: max instances" is expected when a tick is slow

LOCK_FD_ENV = "GPUCTL_CONTROLLER_LOCK_FD"
"""Set by :func:`spawn_background_controller` for the child it hands a held lock to: the inherited fd."""
ACQUIRE_TRIES = 5
"""A probe (:func:`controller_running`) holds the lock a few microseconds: ``acquire`` tries again."""
KEEP_TICKING_AFTER_END = timedelta(minutes=2)
"""Terminal jobs are still ticked a while, so nodes left running by a crash get stopped."""


class ControllerLock:
    """The controller's lock file, opened as a regular file only (:func:`open_regular_file`): a
    symlink planted at its path is refused, never followed, so taking the lock never writes elsewhere."""

    def __init__(self, home: Path, backend: str = "local") -> None:
        self.path = home / ("controller.lock" if backend == "local" else f"controller-{backend}.lock")
        self._fd: int | None = None

    def _open(self) -> int:
        return open_regular_file(self.path, os.O_RDWR | os.O_CREAT)

    def acquire(self) -> bool:
        fd = self._open()
        for attempt in range(ACQUIRE_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == ACQUIRE_TRIES - 1:
                    os.close(fd)
                    return False
                time.sleep(0.02)
        self._hold(fd)
        return True

    def _hold(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # at 0: a handed-over file has moved on
        self._fd = fd

    @property
    def fd(self) -> int | None:
        """The open, locked file while this process holds the lock."""
        return self._fd

    def adopt_inherited(self) -> bool:
        """Take the lock a parent handed over (:data:`LOCK_FD_ENV`): True when this process now holds
        it. The fd must be this lock file, locked (a stray or stale variable is ignored)."""
        value = os.environ.pop(LOCK_FD_ENV, None)
        if value is None or not value.isdigit():
            return False
        fd = int(value)
        try:
            held, ours = os.fstat(fd), os.lstat(self.path)
            if (held.st_dev, held.st_ino) != (ours.st_dev, ours.st_ino):
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours already: the same open file
        except OSError:
            return False
        os.set_inheritable(fd, False)
        self._hold(fd)
        return True

    def held_elsewhere(self) -> bool:
        if self._fd is not None:
            return False
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases the lock
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def controller_running(home: Path, backend: str = "local") -> bool:
    """Whether a live controller holds the lock of ``home`` and ``backend`` (a process that died, even
    with -9, holds nothing). A probe that changes nothing: the lock file is opened read-only, never
    created, and a shared lock is tried without waiting; a controller holds it exclusively, so the try
    fails exactly while one runs. A lock file that is missing or not a regular file: none runs."""
    lock = ControllerLock(home, backend)
    try:
        fd = open_regular_file(lock.path, os.O_RDONLY)
    except (OSError, GpuctlError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the shared lock
    return False


class Controller:
    """Ticks jobs of one backend. ``start()`` runs in background threads; ``stop()`` ends them."""

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        tick_seconds: float = TICK_SECONDS,
        retry: RetryPolicy | None = None,
        lease_s: float = LEASE_S,
    ) -> None:
        self.store = store
        self.leases = LeaseKeeper(store, lease_s)
        """The jobs this controller may tick (:mod:`orchestrator.controller.leases`)."""
        self.notifier = DeliveryWorker(
            Outbox(store.url, backend.name),
            Sender(lambda ref, _note: reference_value(ref, os.environ, store.home)),
            record_notify_failed,
            retry,
        )
        costs = load_cost_config(store.home / "config.yaml")  # budgets: per-user limits while jobs run
        self.driver = Driver(
            store, backend, load_notify_config(store.home), self.notifier.wake, costs, tick_seconds
        )
        self.driver.fence = self.leases
        self.backend = backend
        self.tick_seconds = tick_seconds
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.errors: dict[str, str] = {}
        self.idle = threading.Event()

    def tick_all(self, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        busy = False
        jobs, damaged = self.store.scan_jobs()
        for damage in damaged:  # not ticked (what it is cannot be read): reported once, until repaired
            self._note_error(damage.job_id, damage, now)
        due = [
            job for job in jobs
            if job.backend == self.backend.name
            and not (job.status.terminal and now - job.updated_at > KEEP_TICKING_AFTER_END)
        ]  # fmt: skip
        held = self._take_leases([job.id for job in due])
        ours = [job.id for job in due if job.id in held]  # the others: ticked by the controllers holding them
        read = self._read_round(ours)
        try:
            with self.driver.round() as lost:
                for index, job_id in enumerate(ours):
                    if self.leases.stale(
                        job_id
                    ):  # a long round: renew the rest of it at once, not job by job
                        self._take_leases(ours[index:])
                    self.tick_job(job_id, now, read.get(job_id))
        except GpuctlError as exc:  # the round's row writes: the next round observes and writes again
            log.warning("could not record what the round observed: %s", exc.message)
        for job_id in lost:
            self.leases.lost(job_id)
            log.info("job %s: its lease passed to another controller", job_id)
        for job in due:
            # an ended job whose stopped nodes still run (saving a checkpoint) keeps the controller:
            # it must kill them after their grace period and stop the rendezvous, or they would leak
            busy = busy or not job.status.terminal or self.driver.draining.get(job.id, False)
        if busy:
            self.idle.clear()
        else:
            self.idle.set()

    def _take_leases(self, job_ids: list[str]) -> set[str]:
        try:
            return self.leases.take_round(job_ids)
        except GpuctlError as exc:  # the database is down: no tick could write; the next round retries
            log.warning("could not take the jobs' leases: %s", exc.message)
            return set()

    def _read_round(self, job_ids: list[str]) -> dict[str, tuple[int, RoundRead]]:
        """Job id -> the generation of its lease as held now, and its rows read for its tick
        (:meth:`Driver.read_round`); empty when they could not be read: each tick reads its own and
        reports what fails for that job alone."""
        generations = {job_id: self.leases.generation(job_id) for job_id in job_ids}
        try:
            read = self.driver.read_round(job_ids) if job_ids else {}
        except Exception as exc:
            log.warning("could not read the round's jobs at once (each tick reads its own): %s", exc)
            return {}
        return {
            job_id: (generation, read[job_id])
            for job_id, generation in generations.items()
            if generation is not None and job_id in read
        }

    def tick_job(self, job_id: str, now: datetime, read: tuple[int, RoundRead] | None = None) -> None:
        """One job's tick, if this controller holds (or can take) its lease; never raises for an error
        of that job (see the module's docstring). ``read``: the generation of the lease the round
        held when it read the job's rows, and those rows; used only while the lease is still of that
        generation (no other controller can have written the job since)."""
        try:
            if not self.leases.ensure(job_id):
                return  # another controller holds it
            rows = read[1] if read is not None and read[0] == self.leases.generation(job_id) else None
            with self.leases.ticking(job_id):  # kept while the tick runs, however long its backend calls
                self.driver.tick(job_id, now, rows)
        except LeaseLost:  # lost while ticking: nothing of this tick was written
            self.leases.lost(job_id)
            log.info("job %s: its lease passed to another controller", job_id)
            return
        except Exception as exc:  # one job's data must not stop the others
            reason = permanent_failure(exc)
            if reason is None or not self._fail(job_id, reason, exc, now):
                self._note_error(job_id, exc, now)
            return
        if self.errors.pop(job_id, None) is not None:
            log.info("job %s: ticks work again", job_id)

    def _fail(self, job_id: str, reason: FailureReason, exc: Exception, now: datetime) -> bool:
        if isinstance(exc, SpecError):
            message = "the stored job spec is invalid: " + "; ".join(
                p.split(". To fix")[0] for p in exc.problems
            )
        else:
            message = f"gpuctl could not handle this job ({type(exc).__name__}: {exc}); please report it"
            log.error("job %s: unexpected error; failing the job", job_id, exc_info=exc)
        message = _clip(message, 500)
        try:
            failed = self.driver.fail(job_id, reason, message, now)
        except Exception:  # e.g. the database is busy: the next tick tries again
            log.warning("job %s: could not mark it failed", job_id, exc_info=True)
            return False
        if failed:
            log.warning("job %s: FAILED (%s): %s", job_id, reason, message)
            self.errors.pop(job_id, None)
        return failed

    def _note_error(self, job_id: str, exc: Exception, now: datetime) -> None:
        """Shown to the user while it lasts; logged and recorded as an event once per distinct message."""
        message = exc.message if isinstance(exc, GpuctlError) else f"{type(exc).__name__}: {exc}"
        if self.errors.get(job_id) == message:
            return
        self.errors[job_id] = message
        log.warning("job %s: %s (retrying every tick)", job_id, message)
        try:
            self.store.add_event(job_id, now, "controller_error", _clip(message.splitlines()[0], 500))
        except Exception:  # the log line above is enough
            log.warning("job %s: could not record the error as an event", job_id, exc_info=True)

    def start(self) -> None:
        self.scheduler.add_job(
            self.tick_all, "interval", seconds=self.tick_seconds, max_instances=1, coalesce=True,
            next_run_time=datetime.now(UTC), id="reconcile",
        )  # fmt: skip
        self._schedule_reports()
        self.leases.start()
        self.scheduler.start()
        self.notifier.start()

    def _schedule_reports(self) -> None:
        """Cost reports on the cron schedule of the controller config (``$GPUCTL_HOME/config.yaml``)."""
        config_file = self.store.home / "config.yaml"
        if config_file.exists():
            register_report_job(
                self.scheduler, load_cost_config(config_file), lambda: read_ledger(self.store)
            )
            register_digest_job(  # the weekly avoidable-spend digest, when notify.avoidable_digest is set
                self.scheduler, self.store, self.backend.name, self.driver.notify, self.notifier.wake
            )

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        self.notifier.stop()
        self.hand_back()

    def hand_back(self) -> None:
        """Release the jobs' leases: another controller takes them over at once, not when they run out."""
        try:
            self.leases.release()
        except GpuctlError as exc:
            log.warning("could not hand back the jobs' leases (they expire by themselves): %s", exc.message)


def record_notify_failed(conn: Connection, item: Pending, message: str) -> None:
    """An undeliverable notification, as one ``notify_failed`` job event (in the transaction that
    removes it from the outbox)."""
    StoreWrites.event(conn, item.job_id, datetime.now(UTC), "notify_failed", _clip(message, 500))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def controller_log(home: Path, backend: str) -> Path:
    """Where a background controller of ``backend`` writes its log."""
    return home / ("controller.log" if backend == "local" else f"controller-{backend}.log")


def spawn_background_controller(home: Path, backend: str, lock: ControllerLock | None = None) -> int:
    """Start ``gpuctl controller run --exit-when-idle`` detached from this terminal; returns its PID.
    ``lock``: a lock this process holds, handed to the child (it inherits the locked file; this
    process may then release its own copy). Its own controller must have stopped ticking first."""
    log_file = open_regular_file(
        controller_log(home, backend), os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE
    )
    env = {**os.environ, "GPUCTL_HOME": str(home)}
    env.pop(LOCK_FD_ENV, None)
    handed = lock.fd if lock is not None else None
    if handed is not None:
        env[LOCK_FD_ENV] = str(handed)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "controller", "run", "--backend", backend, "--exit-when-idle"],
        env=env, start_new_session=True, pass_fds=() if handed is None else (handed,),
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
    )  # fmt: skip
    os.close(log_file)
    return proc.pid
