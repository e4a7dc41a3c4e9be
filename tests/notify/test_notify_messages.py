"""Which engine events notify, under which event name; the spec's and config.yaml's notify: checks."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller.engine import note_budget
from orchestrator.errors import SpecError, UserError
from orchestrator.notify import JobRef, NotifyConfig, addressed, load_notify_config, notifications_for
from orchestrator.spec import MarketMode, load_spec_text
from orchestrator.spec.market import MarketKind
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from orchestrator.state.job_state import JobEvent, JobState, SegmentState
from orchestrator.state.placement import Placement
from orchestrator.state.status import FailureReason, JobStatus

NOW = datetime(2026, 3, 1, tzinfo=UTC)
JOB = JobRef("j-1", "ml", "ana")


def placement(market: str) -> Placement:
    return Placement(gpu_type="A100", market=MarketKind(market), cloud="aws", region="r", zone="z1",
                          instance_type="p4d", gpus_per_node=8, node_price_usd_per_hour=2.0,
                          on_demand_node_price_usd_per_hour=4.0, price_source="test")  # fmt: skip


@pytest.mark.parametrize(
    "kind, event",
    [("stalled", NotifyEvent.STALLED), ("idle", NotifyEvent.IDLE), ("deadline_at_risk", NotifyEvent.DEADLINE_AT_RISK),
     ("budget_at_risk", NotifyEvent.BUDGET), ("budget", NotifyEvent.BUDGET)],
)  # fmt: skip
def test_watchdog_forecast_and_budget_events_notify(kind: str, event: NotifyEvent) -> None:
    raised = JobEvent(kind, f"{kind} happened", evidence={"step": 12, "nested": {"a": 1}, "none": None})
    (found,) = notifications_for(JOB, MarketMode.SPOT, JobState(), JobState(), [raised], NOW)
    assert (found.event, found.kind, found.message) == (event, kind, f"{kind} happened")
    assert found.evidence == {"step": 12, "nested": '{"a": 1}'}


def test_transitions_notify_and_other_events_do_not() -> None:
    failed = JobState(status=JobStatus.FAILED, failure_reason=FailureReason.USER_CODE_ERROR)
    events = [
        JobEvent(
            "transition", "RUNNING -> PREEMPTED: 2 node(s) reclaimed by the market", JobStatus.PREEMPTED
        ),
        JobEvent("transition", "PREEMPTED -> RECOVERING: resuming", JobStatus.RECOVERING),
        JobEvent("segment", "segment opened"),
        JobEvent("transition", "RUNNING -> FAILED: training exited with 1", JobStatus.FAILED),
    ]
    found = notifications_for(JOB, MarketMode.SPOT, JobState(), failed, events, NOW)
    assert [(n.event, n.message) for n in found] == [
        (NotifyEvent.PREEMPTED, "2 node(s) reclaimed by the market"),
        (NotifyEvent.FAILED, "training exited with 1"),
    ]
    assert found[1].evidence["reason"] == "user_code_error"


@pytest.mark.parametrize("mode, expected", [(MarketMode.SPOT_WITH_FALLBACK, 1), (MarketMode.ON_DEMAND, 0)])
def test_a_new_attempt_on_demand_notifies_with_the_policy_reason(mode: MarketMode, expected: int) -> None:
    segment = SegmentState(attempt=2, placement=placement("on-demand"), nodes=2, started_at=NOW)
    old = JobState(status=JobStatus.PLACING, attempt=1)
    new = old.model_copy(update={"status": JobStatus.LAUNCHING, "attempt": 2, "placement": placement("on-demand"),
                                 "segments": (segment,)})  # fmt: skip
    why = "PLACING -> LAUNCHING: 2 x A100 on-demand in z1: on-demand: the deadline needs it (slack 0.4 h)"
    found = notifications_for(JOB, mode, old, new, [JobEvent("transition", why, JobStatus.LAUNCHING)], NOW)
    assert len(found) == expected
    if expected:
        assert found[0].event is NotifyEvent.ON_DEMAND
        assert found[0].message == "2 x A100 on-demand in z1: on-demand: the deadline needs it (slack 0.4 h)"
        assert found[0].evidence["node_price_usd_per_hour"] == 2.0 and found[0].evidence["nodes"] == 2


def test_budget_shares_are_announced_once_each() -> None:
    segment = SegmentState(attempt=1, placement=placement("spot"), nodes=1, started_at=NOW)
    state = JobState(status=JobStatus.RUNNING, attempt=1, segments=(segment,))
    at = [NOW.replace(hour=h) for h in (0, 1, 2, 3, 4)]  # $2/h against a $5 budget: 0, 2, 4, 6, 8 USD
    announced = []
    for moment in at:
        state, events = note_budget(state, 5.0, moment)
        announced += [e.evidence["percent"] for e in events if e.evidence]
        state, again = note_budget(state, 5.0, moment)
        assert again == ()
    assert announced == [80, 100]  # 50 and 80 were both passed by 4 USD: the higher one is said
    assert state.budget_alerts == (50, 80, 100)
    assert note_budget(state, None, at[-1]) == (state, ())


def test_targets_pick_their_events() -> None:
    slack = NotifyTarget(webhook="https://hooks.example.com/x", format="slack", events=["failed"])
    every = NotifyTarget(webhook="https://hooks.example.com/y")
    notes = notifications_for(JOB, MarketMode.SPOT, JobState(), JobState(), [JobEvent("idle", "idle")], NOW)
    assert addressed([slack, every], notes) == [(every, notes[0])]


@pytest.mark.parametrize(
    "target, words",
    [
        ("{webhook: ftp://example.com/x}", "not an http or https URL"),
        ("{webhook: 'https://user:pw@example.com/x'}", "user name or password"),
        ("{webhook: 'https://example.com/x', events: [sometimes]}", "preempted"),
        (
            "{email: {to: [not-an-address], from: a@example.com, host: smtp.example.com}}",
            "not an email address",
        ),
        ("{email: {to: [a@example.com], from: a@example.com, host: 'smtp example'}}", "not a host name"),
        (
            "{email: {to: [a@example.com], from: a@example.com, host: h, username: u}}",
            "both username and password",
        ),
        ("{email: {to: [a@example.com], from: a@example.com, host: h, password: hunter2}}", "password"),
        ("{}", "either webhook"),
    ],
)
def test_spec_refuses_bad_targets(target: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(f"name: a\ncommand: t.py\nnotify:\n  - {target}\n")
    assert words in err.value.message


def test_team_targets_from_config_yaml(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "budgets: {teams: {ml: 100}}\nnotify:\n  teams:\n    ml:\n"
        "      - {webhook: {secret: team-slack, key: url}, format: slack, events: [budget]}\n"
    )
    config = load_notify_config(tmp_path)
    spec = load_spec_text("name: a\ncommand: t.py\nteam: ml\nnotify: [{webhook: 'https://example.com/h'}]\n")
    own, team = config.targets_for(spec.team, spec.notify)
    assert own.webhook == "https://example.com/h" and team.format == "slack"
    assert config.targets_for("other") == () and load_notify_config(tmp_path / "none") == NotifyConfig()


@pytest.mark.parametrize(
    "text, words",
    [
        ("notify:\n  teams:\n    ml:\n      - {webhook: 'http://x/y', format: teams}\n", "notify.teams.ml[0].format"),
        ("notify:\n  teams:\n    ml:\n      - {email: {to: [bad], from: a@b.c, host: h}}\n",
         "notify.teams.ml[0].email.to: 'bad' is not an email address"),
        ("notify: [a]\n", "'notify' must be a mapping"),
        ("notify: {team: {}}\n", "keys 'teams' and 'avoidable_digest'"),
        ("notify: {teams: [1]}\n", "notify.teams must map"),
        ("notify: {teams: {ml: [{webhook: 'gopher://x'}]}}\n", "notify.teams.ml[0].webhook"),
    ],
)  # fmt: skip
def test_config_yaml_errors_name_the_field(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(UserError) as err:
        load_notify_config(tmp_path)
    assert words in err.value.message and "To fix:" in err.value.message
