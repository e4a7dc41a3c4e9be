from __future__ import annotations

import itertools

import pytest

from orchestrator.errors import InternalError
from orchestrator.state.status import ALLOWED_TRANSITIONS, JobStatus, can_transition, check_transition

S = JobStatus


def test_happy_path_and_recovery_loop_are_allowed() -> None:
    path = [S.PENDING, S.PLACING, S.LAUNCHING, S.RUNNING, S.PREEMPTED, S.RECOVERING, S.LAUNCHING, S.RUNNING,
            S.RESCALING, S.RUNNING, S.SUCCEEDED]  # fmt: skip
    for a, b in itertools.pairwise(path):
        check_transition(a, b)


@pytest.mark.parametrize("terminal", [S.SUCCEEDED, S.FAILED, S.CANCELLED])
def test_terminal_states_are_final(terminal: JobStatus) -> None:
    for target in JobStatus:
        assert not can_transition(terminal, target)


def test_every_live_state_can_fail_or_be_cancelled() -> None:
    for state in JobStatus:
        if not state.terminal:
            assert can_transition(state, S.FAILED) and can_transition(state, S.CANCELLED)


def test_illegal_transition_is_a_bug() -> None:
    with pytest.raises(InternalError, match="illegal job status transition PENDING -> RUNNING"):
        check_transition(S.PENDING, S.RUNNING)


def test_table_covers_every_state() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)
