"""The operator gives the market policy a tick of at least its timer's interval: two passes of a job at
once (a create event and the timer, a pass retried) must not leave the policy a zero margin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from operators.kubernetes.spot_market import TIMER_S, remember
from orchestrator.controller.placement import candidates_for
from orchestrator.spec import load_spec_text
from orchestrator.state.job_state import JobState

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SPEC = load_spec_text("name: j\ncommand: train.py\nresources: {gpu_types: [V100], nodes: 1}\n")


def test_passes_at_once_leave_the_policy_the_timers_interval() -> None:
    found, state = candidates_for(SPEC, None), JobState()
    first, memory = remember(None, SPEC, found, state, None, None, NOW, 600.0, interval_s=3.0)
    assert first.tick_h == 3.0 / 3600  # a first look
    again, memory = remember(memory, SPEC, found, state, None, None, NOW, 600.0, interval_s=3.0)
    assert again.tick_h == 3.0 / 3600  # a second pass at the same moment
    later, _ = remember(
        memory, SPEC, found, state, None, None, NOW + timedelta(seconds=25), 600.0, interval_s=3.0
    )
    assert later.tick_h == 25.0 / 3600  # a later pass: the time that passed
    default, _ = remember(None, SPEC, found, state, None, None, NOW, 600.0)
    assert default.tick_h == TIMER_S / 3600  # the operator's default interval
