"""The operator writes the ledger database (``GPUCTL_DATABASE_URL``), on SQLite and PostgreSQL, against
the real kopf operator on the testing kit's simulated cluster: a GPUJob deleted mid-run keeps every
segment and its cost in the ledger and in ``gpuctl cost report``; a cancelled one is CANCELLED there
with its cost; an unchanged pass writes nothing; a database down at deletion keeps the finalizer; a
team's month spend at admission counts every namespace, cluster and backend of the ledger."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest

from operators.kubernetes import ledger_db
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.backends.kubernetes.ledger import DELETED_MISSING_NOTE
from orchestrator.cli.main import main
from orchestrator.controller.actions import CloseSegment, Transition
from orchestrator.state.database_url import URL_ENV
from orchestrator.state.external_jobs import ExternalJob, record_external_job
from orchestrator.state.job_state import SegmentState
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import SPOT, drive, running_job
from tests.cli.test_kube_jobs_cli import use_emulator
from tests.operators.kubernetes.operator_cluster import (
    CLUSTER,
    NS,
    RUNNING,
    Cluster,
    job_when,
    pods_when,
    set_pod_status,
    start_running,
)
from tests.operators.kubernetes.operator_handlers import handlers
from tests.operators.kubernetes.test_kube_budget_namespaces import create, gpujob, status_when

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator


def _read(url: str, home: Path, job_id: str) -> tuple[JobRecord | None, list[SegmentRecord]]:
    store = JobStore(home, read_only=True, url=url)
    found = [j for j in store.list_jobs() if j.id == job_id]
    return (found[0] if found else None), store.segments(job_id)


async def ledger_when(
    cluster: Cluster,
    url: str,
    home: Path,
    job_id: str,
    check: Callable[[JobRecord, list[SegmentRecord]], bool],
) -> tuple[JobRecord, list[SegmentRecord]]:
    async def probe() -> tuple[JobRecord, list[SegmentRecord]] | None:
        job, segments = await asyncio.to_thread(_read, url, home, job_id)
        return (job, segments) if job is not None and check(job, segments) else None

    found: tuple[JobRecord, list[SegmentRecord]] = await cluster.wait_for(f"{job_id} in the ledger", probe)
    return found


async def gone(cluster: Cluster, name: str) -> bool:
    try:
        await cluster.job(name)
    except k8s.ApiException as exc:
        return bool(exc.status == 404)
    return False


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


async def _report(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out = await asyncio.to_thread(
        _cli, capsys, "cost", "report", "--backend", "kubernetes", "-o", "json", *args
    )
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


async def _run_all(cluster: Cluster, count: int, attempt: int) -> None:
    def of_attempt(ps: list[dict[str, Any]]) -> bool:
        return len(ps) == count and all(
            p["metadata"]["labels"]["gpuctl.dev/attempt"] == str(attempt) for p in ps
        )

    for p in await pods_when(cluster, of_attempt):
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)


async def test_a_gpujob_deleted_mid_run_keeps_every_segment_in_the_ledger_and_the_report(
    cluster: Cluster, ledger: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await start_running(cluster, "gone", 2)
    await set_pod_status(cluster, "gone-n1", {"phase": "Failed", "reason": "Evicted"})  # a spot reclaim
    await _run_all(cluster, 2, attempt=2)
    await job_when(cluster, "gone", lambda st: st.get("state") == "RUNNING" and st.get("attempt") == 2)
    home = tmp_path / "home"
    # written as the segment closed, before anything is deleted
    await ledger_when(
        cluster, ledger, home, "uid-gone", lambda j, ss: [s.end_reason for s in ss] == ["preempted", None]
    )

    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "gone")
    await cluster.wait_for("the GPUJob deleted", lambda: gone(cluster, "gone"))

    job, segments = await asyncio.to_thread(_read, ledger, home, "uid-gone")
    assert job is not None
    assert (job.name, job.status, job.backend, job.cluster, job.namespace) == (
        "gone",
        JobStatus.CANCELLED,
        "kubernetes",
        CLUSTER,
        NS,
    )
    assert [s.end_reason for s in segments] == ["preempted", "deleted"]
    assert all(s.ended_at is not None for s in segments) and [s.nodes for s in segments] == [2, 2]
    cost = sum(s.cost_usd(datetime.now(UTC)) for s in segments)
    assert cost > 0

    doc = await _report(capsys)  # the ledger: the deleted job is there, and nothing is said missing
    assert DELETED_MISSING_NOTE not in doc["notes"]
    (row,) = doc["rows"]
    assert row["totalCost"] == pytest.approx(cost, rel=1e-6) and row["jobs"] == 1
    by_place = [await _report(capsys, "--by", by) for by in ("namespace", "cluster")]
    assert [d["rows"][0]["name"] for d in by_place] == [NS, CLUSTER]
    assert (await _report(capsys, "-n", "elsewhere"))["rows"] == []


async def test_cancel_leaves_cancelled_with_its_cost_in_the_ledger(
    cluster: Cluster,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_emulator(tmp_path, cluster.url, monkeypatch)
    await start_running(cluster, "stopme", 1)
    code, out = await asyncio.to_thread(
        _cli, capsys, "cancel", "stopme", "--backend", "kubernetes", "--namespace", NS
    )
    assert code == 0, out

    home = tmp_path / "home"
    _, segments = await ledger_when(
        cluster, ledger, home, "uid-stopme", lambda j, ss: j.status is JobStatus.CANCELLED
    )
    assert [s.end_reason for s in segments] == ["cancelled"] and segments[0].ended_at is not None
    status = (await cluster.job("stopme"))["status"]
    assert segments[0].cost_usd(datetime.now(UTC)) == pytest.approx(status["costUsd"], abs=0.01)
    (row,) = (await _report(capsys, "--by", "team"))["rows"]
    assert row["name"] == "default" and row["totalCost"] == pytest.approx(status["costUsd"], abs=0.01)


async def test_an_unchanged_pass_writes_nothing_and_a_write_again_changes_nothing(
    cluster: Cluster, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []
    real = record_external_job

    def counted(url: str, job: ExternalJob, segments: Any) -> None:
        writes.append(str(job.status))
        real(url, job, segments)

    monkeypatch.setattr(ledger_db, "record_external_job", counted)
    await start_running(cluster, "steady", 1)
    home = tmp_path / "home"
    await ledger_when(cluster, ledger, home, "uid-steady", lambda j, ss: j.status is JobStatus.RUNNING)
    before, count = await asyncio.to_thread(_read, ledger, home, "uid-steady"), len(writes)
    passes = cluster.job_passes("steady")
    await cluster.wait_for("three more passes", _after(lambda: cluster.job_passes("steady") >= passes + 3))
    assert len(writes) == count  # steady passes: nothing written
    assert await asyncio.to_thread(_read, ledger, home, "uid-steady") == before

    monkeypatch.setattr(handlers, "ledger", ledger_db.LedgerWrites())  # a restarted operator knows nothing
    await cluster.wait_for("the record written again", _after(lambda: len(writes) > count))
    job, segments = await asyncio.to_thread(_read, ledger, home, "uid-steady")
    assert before[0] is not None and job is not None
    assert job == dataclasses.replace(before[0], updated_at=job.updated_at)
    assert segments == before[1]  # the same segment, neither doubled nor changed


async def test_a_database_down_at_deletion_keeps_the_gpujob_until_its_record_is_written(
    cluster: Cluster, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_running(cluster, "kept", 1)
    tries: list[datetime] = []
    real = handlers.ledger.on_delete

    def on_delete(body: Any, now: datetime) -> bool:
        tries.append(now)
        return real(body, now)

    monkeypatch.setattr(handlers.ledger, "on_delete", on_delete)
    monkeypatch.setenv(URL_ENV, "postgresql+psycopg://gpuctl:secret@127.0.0.1:9/gpuctl")  # nothing listens
    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "kept")
    await cluster.wait_for("two tries to write the record", _after(lambda: len(tries) >= 2))
    assert (await cluster.job("kept"))["metadata"].get("deletionTimestamp")  # still there: its finalizer kept
    assert await cluster.pods() == []  # its pods are stopped meanwhile

    monkeypatch.setenv(URL_ENV, ledger)  # the database is back
    await cluster.wait_for("the GPUJob deleted", lambda: gone(cluster, "kept"))
    job, segments = await asyncio.to_thread(_read, ledger, tmp_path / "home", "uid-kept")
    assert job is not None and job.status is JobStatus.CANCELLED
    assert [s.end_reason for s in segments] == ["deleted"]
    assert (
        segments[0].ended_at == tries[0]
    )  # closed when the pods were deleted, not when the database came back


MID_MONTH = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
"""The operator's clock in the budget test: every spend of the test falls in its month."""
BUDGETS = (
    "budgets:\n"
    "  teams: {vision: 100, lab: 100000}\n"
    "  namespace_teams: {ml-a: [vision], ml-b: [vision, lab]}\n"
    "  users: {ml-b: {monthly_usd: 50}}\n"
)
"""vision's $100 is charged from ml-a and ml-b; user (namespace) ml-b may spend $50 a month."""


async def test_a_teams_and_a_users_spend_count_every_namespace_cluster_and_backend_of_the_ledger(
    cluster: Cluster, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "costs.yaml"
    config.write_text(BUDGETS)
    monkeypatch.setenv(COST_CONFIG_ENV, str(config))
    monkeypatch.setattr(handlers, "clock", lambda: MID_MONTH)
    ago = MID_MONTH - timedelta(hours=2)
    for uid, namespace, team, where, usd in (("k-a", "ml-a", "vision", CLUSTER, 30.0),
                                             ("k-b", "ml-b", "vision", "prod-us", 30.0),
                                             ("k-c", "ml-b", "lab", CLUSTER, 25.0)):  # fmt: skip
        record_external_job(
            ledger, _spent(uid, namespace, team, where, ago), [_segment(ago, usd)]
        )  # deleted GPUJobs
    store = JobStore(tmp_path / "home", url=ledger)
    local = running_job(store, ago, name="local", user="ana", team="vision", nodes=38)  # $1/h x 38 nodes
    drive(
        store,
        local,
        ago + timedelta(hours=1),
        CloseSegment("finished"),
        Transition(JobStatus.SUCCEEDED, "done"),
    )

    await create(cluster, gpujob("more", "ml-a", "vision"))  # $98 spent of $100: one more hour does not fit
    status = await status_when(cluster, "more", "ml-a", "FAILED")
    assert status["failureReason"] == "over_budget"
    assert "team 'vision' has $2.00 left of its $100.00 monthly budget (spent $98.00)" in status["message"]
    await create(cluster, gpujob("again", "ml-b", "lab"))  # user ml-b: $30 on prod-us + $25 here
    status = await status_when(cluster, "again", "ml-b", "FAILED")
    assert status["failureReason"] == "over_budget"
    assert "user 'ml-b' has $0.00 left of its $50.00 monthly budget (spent $55.00)" in status["message"]


def _spent(uid: str, namespace: str, team: str, where: str, at: datetime) -> ExternalJob:
    return ExternalJob(
        id=uid, name=uid, user=namespace, team=team, backend="kubernetes", cluster=where, namespace=namespace,
        status=JobStatus.CANCELLED, failure_reason=None, message="the GPUJob was deleted", spec_json="{}",
        submitted_at=at, updated_at=at + timedelta(hours=1), attempts=1,
    )  # fmt: skip


def _segment(start: datetime, usd_per_hour: float) -> SegmentState:
    placement = dataclasses.replace(SPOT, node_price_usd_per_hour=usd_per_hour)
    return SegmentState(attempt=1, placement=placement, nodes=1, started_at=start, ended_at=start + timedelta(hours=1),
                        end_reason="deleted")  # fmt: skip


def _after(check: Callable[[], bool]) -> Callable[[], Any]:
    async def probe() -> bool:
        return check()

    return probe
