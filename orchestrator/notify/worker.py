"""The delivery worker: a background thread that empties the outbox, so that no tick ever waits on a
webhook or a mail server.

Each due notification is sent once per pass; one that fails is tried again after an exponentially
growing delay (:class:`RetryPolicy`: 2 s, 4 s, 8 s, ... at most 5 min apart, 8 tries: about 8.5
minutes), and one that cannot be delivered (tries used up, or a permanent error such as HTTP 404)
is removed and reported once through ``on_failed`` (the hosts record a ``notify_failed`` job event).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from orchestrator.notify.outbox import Outbox, Pending
from orchestrator.notify.senders import DeliveryError, Sender

log = logging.getLogger(__name__)

FailureRecorder = Callable[[sqlite3.Connection, Pending, str], None]
"""Records an undeliverable notification (``message`` is safe to show) inside the outbox's
transaction that removes it."""

POLL_S = 1.0
"""The worker looks at the outbox at least this often (a host in another process may have added rows)."""


@dataclass(frozen=True)
class RetryPolicy:
    first_delay_s: float = 2.0
    factor: float = 2.0
    max_delay_s: float = 300.0
    max_attempts: int = 8
    """Tries in all, the first included."""

    def delay_s(self, failed_attempts: int) -> float:
        """The wait after the ``failed_attempts``-th failed try (1, 2, ...)."""
        return float(min(self.max_delay_s, self.first_delay_s * self.factor ** max(0, failed_attempts - 1)))


def failure_message(item: Pending, tries: int, error: str) -> str:
    note = item.notification
    return (f"could not deliver the '{note.event}' notification to {item.target.describe()} "
            f"after {tries} {'try' if tries == 1 else 'tries'}: {error}")  # fmt: skip


class DeliveryWorker:
    """Sends what the outbox holds; :meth:`start` runs it in a daemon thread, :meth:`deliver_due` is
    one synchronous pass (tests, and hosts that want it now)."""

    def __init__(
        self,
        outbox: Outbox,
        sender: Sender,
        on_failed: FailureRecorder,
        retry: RetryPolicy | None = None,
        clock: Callable[[], datetime] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.outbox = outbox
        self.sender = sender
        self.on_failed = on_failed
        self.retry = retry or RetryPolicy()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.poll_s = poll_s
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def deliver_due(self) -> int:
        """Try every due notification once; returns how many were tried."""
        items = self.outbox.due(self.clock())
        for item in items:
            if self._stopping.is_set():
                break
            self._deliver(item)
        return len(items)

    def _deliver(self, item: Pending) -> None:
        try:
            self.sender.send(item.target, item.notification)
        except DeliveryError as err:
            tries = item.attempts + 1
            if err.permanent or tries >= self.retry.max_attempts:
                message = failure_message(item, tries, err.what)
                log.warning("job %s: %s", item.job_id, message)
                self.outbox.give_up(item, lambda conn: self.on_failed(conn, item, message))
            else:
                when = self.clock() + timedelta(seconds=self.retry.delay_s(tries))
                log.info("job %s: notification not delivered (%s); trying again at %s", item.job_id, err.what,
                         when.isoformat(timespec="seconds"))  # fmt: skip
                self.outbox.retry_at(item, when, err.what)
            return
        except Exception:  # a bug in a payload or sender: never retried forever, never kills the thread
            log.exception("job %s: sending a notification failed unexpectedly", item.job_id)
            message = failure_message(item, item.attempts + 1, "an internal error in gpuctl (see its log)")
            self.outbox.give_up(item, lambda conn: self.on_failed(conn, item, message))
            return
        self.outbox.delivered(item)

    def wake(self) -> None:
        """New rows were added: look now rather than at the next poll."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="gpuctl-notify", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.outbox.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.deliver_due()
                wait = self._until_next()
            except Exception:  # the store busy or broken: log, wait, try again
                log.warning("notification delivery: could not read the outbox", exc_info=True)
                wait = self.poll_s
            self._wake.wait(wait)
            self._wake.clear()
        self.outbox.close()

    def _until_next(self) -> float:
        upcoming = self.outbox.next_due()
        if upcoming is None:
            return self.poll_s
        return max(0.0, min(self.poll_s, (upcoming - self.clock()).total_seconds()))
