"""Job status, failure reasons and the one table of allowed transitions.

    PENDING → PLACING → LAUNCHING → RUNNING → SUCCEEDED
                 ▲          ▲          │  ▲
                 │          │          ▼  │
                 └── RECOVERING ◀── PREEMPTED     LAUNCHING | RUNNING ⇄ RESCALING → LAUNCHING (to grow)
    any non-terminal state → FAILED(reason) | CANCELLED

Every change goes through :func:`check_transition`; an illegal one is a gpuctl bug and raises.
"""

from __future__ import annotations

from enum import StrEnum

from orchestrator.errors import InternalError


class JobStatus(StrEnum):
    PENDING = "PENDING"
    PLACING = "PLACING"
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    RESCALING = "RESCALING"
    PREEMPTED = "PREEMPTED"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


class FailureReason(StrEnum):
    NO_CAPACITY = "no_capacity"
    OVER_BUDGET = "over_budget"
    DEADLINE_IMPOSSIBLE = "deadline_impossible"
    USER_CODE_ERROR = "user_code_error"
    TOO_MANY_RESTARTS = "too_many_restarts"
    BACKEND_ERROR = "backend_error"
    INVALID_SPEC = "invalid_spec"
    """The job spec is invalid: refused at admission (a market policy or GPU type gpuctl does not know),
    or the stored spec cannot be read (corrupted, or written by an older gpuctl with looser checks)."""
    STALLED = "stalled"
    """The watchdog stopped it: the step counter stopped advancing or the GPUs idled (``watchdog``)."""
    INTERNAL_ERROR = "internal_error"
    """The controller met an unexpected error handling this job (a gpuctl bug, or data it did not expect)."""


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})

_S = JobStatus
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.PENDING: frozenset({_S.PLACING}),
    _S.PLACING: frozenset({_S.LAUNCHING, _S.RECOVERING, _S.SUCCEEDED}),
    # RESCALING: an elastic job that loses a node before its first progress line goes on with fewer
    _S.LAUNCHING: frozenset({_S.RUNNING, _S.PREEMPTED, _S.RECOVERING, _S.RESCALING, _S.SUCCEEDED}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.PREEMPTED, _S.RESCALING, _S.RECOVERING}),
    _S.RESCALING: frozenset({_S.RUNNING, _S.LAUNCHING, _S.PREEMPTED, _S.RECOVERING, _S.SUCCEEDED}),
    _S.PREEMPTED: frozenset({_S.RECOVERING}),
    # SUCCEEDED from PLACING/RECOVERING: training had finished when its nodes were stopped or lost
    _S.RECOVERING: frozenset({_S.PLACING, _S.LAUNCHING, _S.SUCCEEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}
"""Transitions besides these: every non-terminal state may go to FAILED or CANCELLED."""


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    if current.terminal:
        return False
    if target in (JobStatus.FAILED, JobStatus.CANCELLED):
        return True
    return target in ALLOWED_TRANSITIONS[current]


def check_transition(current: JobStatus, target: JobStatus) -> None:
    if not can_transition(current, target):
        raise InternalError(f"illegal job status transition {current} -> {target}")
