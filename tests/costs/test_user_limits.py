"""Per-user limits: the config (``budgets.users``, ``budgets.default_user``), where a user stands from
the job store's jobs and segments or from GPUJobs, and what each limit allows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.costs.budgets import (
    gpujob_user_standing,
    parse_cost_config,
    submitted_user_standing,
    user_standing,
)
from orchestrator.costs.user_limits import (
    UserLimits,
    UserStanding,
    check_user_submission,
    month_exceeded,
    nodes_within_cap,
    slot_wait,
)
from orchestrator.errors import UserError
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus

NOW = datetime(2026, 3, 20, 12, tzinfo=UTC)


def test_a_users_limits_are_its_own_fields_else_the_defaults() -> None:
    config = parse_cost_config(
        "budgets:\n"
        "  users: {alice: {monthly_usd: 300, hourly_usd: 40, max_jobs: 3}, bob: {max_jobs: null}}\n"
        "  default_user: {monthly_usd: 100, max_jobs: 2}\n"
    )
    alice = config.users.of("alice")
    assert (alice.monthly_usd, alice.hourly_usd, alice.max_jobs) == (300.0, 40.0, 3)
    assert alice.setting("max_jobs") == "budgets.users.alice.max_jobs"
    bob = config.users.of("bob")
    assert (bob.monthly_usd, bob.hourly_usd, bob.max_jobs) == (100.0, None, None)
    assert bob.setting("monthly_usd") == "budgets.default_user.monthly_usd"
    assert config.users.of("Alice") == UserLimits(100.0, None, 2), "names match exactly"
    assert not parse_cost_config("budgets: {teams: {a: 1}}").users.of("alice").any


@pytest.mark.parametrize(
    ("text", "field", "fix"),
    [
        ("users: {alice: {monthly_usd: -1}}", r"budgets\.users\.alice\.monthly_usd is -1", "USD per month"),
        ("users: {alice: {hourly_usd: .nan}}", r"budgets\.users\.alice\.hourly_usd is nan", "USD per hour"),
        ("users: {alice: {max_jobs: 0}}", r"budgets\.users\.alice\.max_jobs is 0", "how many jobs"),
        ("users: {alice: {max_jobs: 2.5}}", r"budgets\.users\.alice\.max_jobs is 2\.5", "how many jobs"),
        ("default_user: {max_jobs: true}", r"budgets\.default_user\.max_jobs is True", "how many jobs"),
        (
            "users: {alice: {monthly: 3}}",
            r"budgets\.users\.alice\.monthly is not a user limit",
            "monthly_usd",
        ),
        ("users: {alice: 300}", r"budgets\.users\.alice is 300, not a mapping", "monthly_usd: 300"),
        ("users: [alice]", r"budgets\.users is \['alice'\], not a mapping", "users: {alice:"),
        ("default_users: {}", r"budgets\.default_users is not a budgets setting", "default_user"),
        ("spend_namespaces: ml", r"budgets\.spend_namespaces is 'ml', not a list", "spend_namespaces: ["),
    ],
)
def test_a_bad_user_limit_is_refused_naming_the_field_and_the_fix(text: str, field: str, fix: str) -> None:
    with pytest.raises(UserError, match=field) as raised:
        parse_cost_config(f"budgets: {{{text}}}")
    assert fix in (raised.value.fix or "")


def job(jid: str, user: str, status: JobStatus, minutes_ago: int) -> JobRecord:
    at = NOW - timedelta(minutes=minutes_ago)
    return JobRecord(id=jid, name=jid, user=user, team="t", backend="local", status=status, failure_reason=None,
                     message="", spec_json="{}", submitted_at=at, deadline=None, updated_at=at, attempts=1,
                     preemptions=0, restarts=0)  # fmt: skip


def segment(
    job_id: str, start: datetime, end: datetime | None, price: float, nodes: int = 1
) -> SegmentRecord:
    return SegmentRecord(id=0, job_id=job_id, attempt=1, gpu_type="A10G", instance_type="x", market="spot",
                         cloud="c", region="r", zone="z", nodes=nodes, gpus_per_node=1, started_at=start,
                         ended_at=end, node_price_usd_per_hour=price, on_demand_node_price_usd_per_hour=price,
                         price_source="test", end_reason=None)  # fmt: skip


def test_where_a_user_stands_in_the_job_store() -> None:
    jobs = [
        job("done", "alice", JobStatus.SUCCEEDED, 300),
        job("running", "alice", JobStatus.RUNNING, 200),
        job("earlier", "alice", JobStatus.PENDING, 100),
        job("me", "alice", JobStatus.PENDING, 50),
        job("later", "alice", JobStatus.PENDING, 10),
        job("bobs", "bob", JobStatus.RUNNING, 400),
    ]
    segments = [
        segment("done", NOW - timedelta(days=40), NOW - timedelta(hours=4), 1.0),  # this month: 19 days + 8 h
        segment("running", NOW - timedelta(hours=2), None, 3.0, nodes=2),
        segment("bobs", NOW - timedelta(hours=2), None, 50.0),
    ]
    limits = UserLimits(1000.0, 20.0, 2)
    me = user_standing(jobs, segments, jobs[3], limits, NOW)
    assert me.month_spent_usd == pytest.approx((19 * 24 + 8) * 1.0 + 2 * 3.0 * 2)
    assert me.others_hourly_usd == pytest.approx(6.0)
    assert me.ahead == 2, "the running one, and the one submitted before (not the later one)"
    assert slot_wait(me) is not None
    assert user_standing(jobs, segments, jobs[2], limits, NOW).ahead == 1
    new = submitted_user_standing(jobs, segments, "alice", limits, NOW)
    assert new.others_hourly_usd == pytest.approx(6.0) and new.ahead == 4


def gpujob(name: str, namespace: str, state: str, created: str, segs: list[dict[str, Any]]) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "creationTimestamp": created}
    return {"metadata": meta, "spec": {}, "status": {"state": state, "segments": segs}}


def test_where_a_user_stands_in_the_gpujobs_it_can_see() -> None:
    """On Kubernetes a GPUJob's user is its namespace."""
    open_seg = {"start": "2026-03-20T10:00:00Z", "nodes": 2, "nodePriceUsdPerHour": 4.0}
    closed = {
        "start": "2026-03-01T00:00:00Z",
        "end": "2026-03-01T10:00:00Z",
        "nodes": 1,
        "nodePriceUsdPerHour": 1.0,
    }
    jobs = [
        gpujob("a", "alice", "RUNNING", "2026-03-20T10:00:00Z", [closed, open_seg]),
        gpujob("b", "alice", "PENDING", "2026-03-20T11:00:00Z", []),
        gpujob("c", "alice", "PENDING", "2026-03-20T11:30:00Z", []),
        gpujob("d", "alice", "FAILED", "2026-03-19T11:30:00Z", [closed]),
        gpujob("x", "bob", "RUNNING", "2026-03-20T10:00:00Z", [open_seg]),
    ]
    me = gpujob_user_standing(jobs, jobs[2], UserLimits(max_jobs=2), NOW)
    assert me.user == "alice" and me.ahead == 2
    assert me.month_spent_usd == pytest.approx(10.0 + 16.0 + 10.0)
    assert me.others_hourly_usd == pytest.approx(8.0)
    assert gpujob_user_standing(jobs, jobs[1], UserLimits(max_jobs=2), NOW).ahead == 1


def test_what_each_limit_allows() -> None:
    standing = UserStanding("alice", UserLimits(300.0, 10.0, 3), month_spent_usd=299.0, others_hourly_usd=6.0)
    assert month_exceeded(standing) is None
    assert month_exceeded(replace(standing, month_spent_usd=300.0)) == (
        "user 'alice' spent 300.00 of its 300.00 USD monthly budget (budgets.default_user.monthly_usd)"
    )
    assert nodes_within_cap(standing, 1.5, 4, 1) == 2, "4 USD/h of room: two nodes of an elastic job"
    assert nodes_within_cap(standing, 1.5, 4, 3) == 0, "fewer than its minimum: it waits"
    assert nodes_within_cap(standing, 1.0, 4, 4) == 4 and nodes_within_cap(None, 99.0, 4, 4) == 4
    assert slot_wait(replace(standing, ahead=2)) is None and slot_wait(replace(standing, ahead=3))
    with pytest.raises(UserError, match=r"runs \$6.00/h; job 'j' adds \$5.00/h, above its \$10.00/h cap"):
        check_user_submission("j", standing, 5.0, 0.5, "one hour")
    with pytest.raises(UserError, match=r"has \$1.00 left of its \$300.00 monthly budget \(spent \$299.00\)"):
        check_user_submission("j", standing, 2.0, 2.0, "one hour")
    check_user_submission("j", standing, 4.0, 1.0, "one hour")
