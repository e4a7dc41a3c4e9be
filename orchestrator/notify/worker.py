"""The delivery worker: empties the outbox in the background, so that no tick ever waits on a webhook
or a mail server, and no target waits on another.

Each due notification is sent on a thread of its own: at most :data:`MAX_IN_FLIGHT` at a time, and at
most one per target (a target's notifications go out in order), so a receiver that is slow or
hanging holds one of them, for at most the sender's deadline, and every other target is served
meanwhile. One that fails (the deadline passed included) is tried again after an exponentially
growing delay (:class:`RetryPolicy`: 2 s, 4 s, 8 s, ... at most 5 min apart, 8 tries: about 8.5
minutes), and one that cannot be delivered (tries used up, or a permanent error such as HTTP 404)
is removed and reported once through ``on_failed`` (the hosts record a ``notify_failed`` job event).
Outcomes are written to the outbox by the worker's own thread, never by a sending thread.

Several controllers sharing one database each run a worker over the same outbox: a worker sends a row
only once it has claimed it (:meth:`Outbox.claim`), so each try goes out from one controller; a claim
lasts the sender's deadline plus :data:`~orchestrator.notify.outbox.CLAIM_MARGIN_S`, after which a row
left by a worker that died is sent by another.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection

from orchestrator.notify.outbox import CLAIM_MARGIN_S, Outbox, Pending
from orchestrator.notify.senders import DeliveryError, Sender

log = logging.getLogger(__name__)

FailureRecorder = Callable[[Connection, Pending, str], None]
"""Records an undeliverable notification (``message`` is safe to show) inside the outbox's
transaction that removes it."""

POLL_S = 1.0
"""The worker looks at the outbox at least this often (a host in another process may have added rows)."""
MAX_IN_FLIGHT = 8
"""Deliveries under way at once (each to a different target)."""


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


@dataclass
class _Flight:
    """One delivery under way on a thread of its own."""

    item: Pending
    target: str
    done: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None


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
        max_in_flight: int = MAX_IN_FLIGHT,
        claim_s: float | None = None,
    ) -> None:
        self.outbox = outbox
        self.sender = sender
        self.on_failed = on_failed
        self.retry = retry or RetryPolicy()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.poll_s = poll_s
        self.max_in_flight = max_in_flight
        self.claim_s = sender.deadline_s + CLAIM_MARGIN_S if claim_s is None else claim_s
        """How long a claim on a row being sent lasts (longer than one delivery may take)."""
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._finished = threading.Condition()
        self._collecting = threading.Lock()
        self._flights: dict[int, _Flight] = {}

    def deliver_due(self) -> int:
        """Send every due notification once, waiting for the outcomes; returns how many were tried."""
        tried: set[int] = set()
        while not self._stopping.is_set():
            tried.update(f.item.id for f in self._dispatch(exclude=tried))
            mine = [f for f in self._under_way() if f.item.id in tried]
            if not mine:
                break
            self._wait_for_one(mine)
            self._collect()
        return len(tried)

    def _wait_for_one(self, flights: list[_Flight]) -> None:
        with self._finished:
            self._finished.wait_for(lambda: any(f.done.is_set() for f in flights), self.poll_s)

    def _under_way(self) -> list[_Flight]:
        with self._lock:
            return list(self._flights.values())

    def _dispatch(self, exclude: Collection[int] = ()) -> list[_Flight]:
        """Claim and start the due notifications whose target is free, up to :data:`MAX_IN_FLIGHT` under
        way."""
        if self._stopping.is_set():
            return []
        now = self.clock()
        reserved = self._reserve(self.outbox.due(now), exclude)
        until = now + timedelta(seconds=self.claim_s)
        started = [f for f in reserved if self._claimed(f, now, until)]
        for flight in started:
            threading.Thread(
                target=self._send, args=(flight,), name="gpuctl-notify-send", daemon=True
            ).start()
        return started

    def _claimed(self, flight: _Flight, now: datetime, until: datetime) -> bool:
        """Claim ``flight``'s row; one another worker took (or that went meanwhile) is let go."""
        claimed = False
        try:
            claimed = self.outbox.claim(flight.item, now, until)
        finally:
            if not claimed:
                with self._lock:
                    del self._flights[flight.item.id]
        return claimed

    def _reserve(self, items: list[Pending], exclude: Collection[int]) -> list[_Flight]:
        """Take places under way for ``items`` whose target is free (a target has one at a time)."""
        started: list[_Flight] = []
        with self._lock:
            busy = {f.target for f in self._flights.values()}
            for item in items:
                if len(self._flights) >= self.max_in_flight:
                    break
                target = item.target.model_dump_json(by_alias=True, exclude_none=True)
                if item.id in exclude or item.id in self._flights or target in busy:
                    continue
                flight = _Flight(item, target)
                self._flights[item.id] = flight
                busy.add(target)
                started.append(flight)
        return started

    def _send(self, flight: _Flight) -> None:
        try:
            self.sender.send(flight.item.target, flight.item.notification)
        except Exception as err:  # recorded by the worker's thread
            flight.error = err
        finally:
            flight.done.set()
            with self._finished:
                self._finished.notify_all()
            self._wake.set()

    def _collect(self) -> None:
        """Write the outcome of every finished delivery (a flight leaves :attr:`_flights` only once its
        outcome is in the outbox, so its row is never sent twice at once)."""
        with self._collecting:
            for flight in [f for f in self._under_way() if f.done.is_set()]:
                self._record(flight.item, flight.error)
                with self._lock:
                    del self._flights[flight.item.id]

    def _record(self, item: Pending, error: Exception | None) -> None:
        if error is None:
            self.outbox.delivered(item)
        elif isinstance(error, DeliveryError):
            tries = item.attempts + 1
            if error.permanent or tries >= self.retry.max_attempts:
                message = failure_message(item, tries, error.what)
                log.warning("job %s: %s", item.job_id, message)
                self.outbox.give_up(item, lambda conn: self.on_failed(conn, item, message))
            else:
                when = self.clock() + timedelta(seconds=self.retry.delay_s(tries))
                log.info("job %s: notification not delivered (%s); trying again at %s", item.job_id, error.what,
                         when.isoformat(timespec="seconds"))  # fmt: skip
                self.outbox.retry_at(item, when, error.what)
        else:  # a bug in a payload or sender: never retried forever, never kills the thread
            # Where it happened, not its text: an exception's message may hold a secret's value.
            log.error("job %s: sending a notification failed unexpectedly (%s)\n%s", item.job_id,
                      type(error).__name__, "".join(traceback.format_tb(error.__traceback__)))  # fmt: skip
            message = failure_message(item, item.attempts + 1, "an internal error in gpuctl (see its log)")
            self.outbox.give_up(item, lambda conn: self.on_failed(conn, item, message))

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
        """Stop starting deliveries; one under way is left to end on its own (its row stays in the
        outbox, claimed: a worker sends it again once the claim has passed)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.outbox.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._collect()
                self._dispatch()
                wait = self._until_next()
            except Exception:  # the store busy or broken: log, wait, try again
                log.warning("notification delivery: could not read the outbox", exc_info=True)
                wait = self.poll_s
            self._wake.wait(wait)
            self._wake.clear()
        self.outbox.close()

    def _until_next(self) -> float:
        """Until the next row falls due; a row due now waits for a target or a thread to free up (a
        finished delivery wakes the worker) or for the next poll."""
        upcoming = self.outbox.next_due()
        if upcoming is None:
            return self.poll_s
        delay = (upcoming - self.clock()).total_seconds()
        return self.poll_s if delay <= 0 else min(self.poll_s, delay)
