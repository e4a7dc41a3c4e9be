"""Small builders of job and segment records for the cost tests."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def at(hour: float, day: int = 2) -> datetime:
    h = int(hour)
    return datetime(2026, 3, day, h, round((hour - h) * 60), tzinfo=UTC)


def job(job_id: str, *, user: str = "ana", team: str = "ml-research", preemptions: int = 0) -> JobRecord:
    return JobRecord(
        id=job_id,
        name=f"{job_id}-name",
        user=user,
        team=team,
        backend="local",
        status=JobStatus.SUCCEEDED,
        failure_reason=None,
        message="",
        spec_json="{}",
        submitted_at=T0,
        deadline=None,
        updated_at=T0,
        attempts=preemptions + 1,
        preemptions=preemptions,
        restarts=0,
    )


_ids = iter(range(1, 10**9))


def seg(
    job_id: str,
    start: datetime,
    end: datetime | None,
    *,
    price: float,
    od: float,
    nodes: int = 1,
    gpus_per_node: int = 1,
    market: str = "spot",
    zone: str = "us-east-1a",
    gpu: str = "V100",
    attempt: int = 1,
) -> SegmentRecord:
    return SegmentRecord(
        id=next(_ids),
        job_id=job_id,
        attempt=attempt,
        gpu_type=gpu,
        instance_type="p3.2xlarge",
        market=market,
        cloud="aws",
        region="us-east-1",
        zone=zone,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        started_at=start,
        ended_at=end,
        node_price_usd_per_hour=price,
        on_demand_node_price_usd_per_hour=od,
        price_source="built-in list prices",
        end_reason="preempted" if end else None,
    )


def preempted_three_times() -> tuple[JobRecord, list[SegmentRecord]]:
    """Job 'j3': 3 preemptions, zones us-east-1a/1b, spot then on-demand (see test_ledger for sums)."""
    return job("j3", preemptions=3), [
        seg("j3", at(10), at(12), price=1.0, od=3.0, nodes=2, zone="us-east-1a", attempt=1),
        seg("j3", at(12.5), at(13.5), price=1.2, od=3.0, nodes=2, zone="us-east-1b", attempt=2),
        seg("j3", at(14), at(16), price=1.2, od=3.0, nodes=1, zone="us-east-1b", attempt=3),
        seg("j3", at(16.25), at(17.25), price=3.0, od=3.0, nodes=2, market="on-demand", attempt=4),
    ]


def fleet(days: int = 5) -> tuple[list[JobRecord], list[SegmentRecord], dict[str, float]]:
    """A few teams, users, GPU types and markets over ``days`` days, with idle data for most jobs."""
    jobs: list[JobRecord] = []
    segments: list[SegmentRecord] = []
    idle: dict[str, float] = {}
    gpus = [("V100", 3.06, 0.92), ("A100", 32.77, 12.1), ("T4", 0.53, 0.16)]
    for i in range(12):
        jid = f"job{i:02d}"
        jobs.append(
            job(jid, user=f"user{i % 4}", team=("ml-research", "vision", "nlp")[i % 3], preemptions=i % 3)
        )
        gpu, od, spot = gpus[i % 3]
        for k in range(i % 3 + 1):
            start = at(1 + 3 * k, day=1 + i % days)
            market = "on-demand" if k == 2 else "spot"
            segments.append(
                seg(
                    jid,
                    start,
                    start + (at(2) - at(0)),
                    price=od if market == "on-demand" else spot,
                    od=od,
                    nodes=1 + i % 2,
                    gpus_per_node=(1, 4, 8)[i % 3],
                    market=market,
                    gpu=gpu,
                    attempt=k + 1,
                )
            )
        if i % 4:
            idle[jid] = (
                0.1 * (i % 10) * sum(s.hours(at(23, day=28)) * s.gpus for s in segments if s.job_id == jid)
            )
    return jobs, segments, idle
