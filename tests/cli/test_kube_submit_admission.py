"""`gpuctl submit --backend kubernetes` checks what the operator checks, from the same sources, before
any GPUJob is created (against the testing kit's API emulator, on SQLite and PostgreSQL):

- with a ledger database, a team's month spend is the whole ledger's (GPUJobs of other namespaces and
  clusters, deleted ones, local and SLURM jobs), and a user's hourly cap counts its running jobs on
  other clusters;
- without one, a refusal says it saw only the GPUJobs of the namespace;
- a job none of whose allowed zones the cluster has is refused, naming the cluster's zones; an account
  that may not list nodes or NodePools gets a note and the operator's check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes import client
from orchestrator.cli.main import main
from orchestrator.controller.actions import CloseSegment, Transition
from orchestrator.costs.budgets import month_window
from orchestrator.extras import require
from orchestrator.state.database_url import URL_ENV
from orchestrator.state.external_jobs import ExternalJob, record_external_job
from orchestrator.state.job_state import SegmentState
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.kube_api import KubeApi
from orchestrator.testing.states import SPOT, drive, running_job
from tests.cli.test_kube_jobs_cli import use_emulator

pytestmark = pytest.mark.asyncio
kmock = require("kmock", "the testing kit's API emulator")

K = ("--backend", "kubernetes", "--namespace", "ml")
H100_JOB = "name: {name}\ncommand: train.py\nresources: {{gpu_types: [H100], gpus_per_node: 8, nodes: 1}}\n"


@pytest_asyncio.fixture
async def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[KubeApi]:
    """The emulated API server, the CLI's kubeconfig naming it, and an empty gpuctl home."""
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.delenv("GPUCTL_PRICE_CATALOG", raising=False)
    monkeypatch.delenv("GPUCTL_OPERATOR_CONFIG", raising=False)
    async with KubeApi(namespace="ml") as emulated:
        use_emulator(tmp_path, emulated.url, monkeypatch)
        yield emulated


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


async def submit(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> tuple[int, str]:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    return await asyncio.to_thread(_cli, capsys, "submit", str(job), *K, "--detach")


async def gpujob_names() -> list[str]:
    return [str(j["metadata"]["name"]) for j in await asyncio.to_thread(client.list_gpujobs, "ml")]


def _row(uid: str, user: str, team: str, cluster: str, status: JobStatus, at: datetime) -> ExternalJob:
    """A GPUJob's ledger row, as an operator on ``cluster`` writes it."""
    return ExternalJob(
        id=uid, name=uid, user=user, team=team, backend="kubernetes", cluster=cluster, namespace=user,
        status=status, failure_reason=None, message="", spec_json="{}", submitted_at=at, updated_at=at,
        attempts=1,
    )  # fmt: skip


def _segment(start: datetime, usd_per_hour: float, seconds: float | None) -> SegmentState:
    placement = dataclasses.replace(SPOT, node_price_usd_per_hour=usd_per_hour)
    end = None if seconds is None else start + timedelta(seconds=seconds)
    return SegmentState(attempt=1, placement=placement, nodes=1, started_at=start, ended_at=end)


# --- spend over the whole ledger ---------------------------------------------------------------
async def test_a_teams_spend_in_another_namespace_and_a_local_job_refuse_the_submit(
    api: KubeApi,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(URL_ENV, database_url)
    (tmp_path / "home" / "config.yaml").write_text(
        "budgets: {teams: {vision: 100}, namespace_teams: {ml: [vision], cv: [vision]}}\n"
    )
    start = month_window(datetime.now(UTC)).start  # 10 s from the month's start, at high prices
    # a GPUJob of namespace cv on another cluster, deleted since: $60
    record_external_job(
        database_url,
        _row("uid-cv", "cv", "vision", "prod-us", JobStatus.CANCELLED, start),
        [_segment(start, 21600.0, 10)],
    )
    store = JobStore(tmp_path / "home", url=database_url)  # a local job of the team: $38
    local = running_job(
        store,
        start,
        name="local",
        user="ana",
        team="vision",
        placement=dataclasses.replace(SPOT, node_price_usd_per_hour=13680.0),
    )
    drive(
        store,
        local,
        start + timedelta(seconds=10),
        CloseSegment("finished"),
        Transition(JobStatus.SUCCEEDED, "done"),
    )

    code, out = await submit(capsys, tmp_path, H100_JOB.format(name="more") + "team: vision\n")
    assert code == 2, out
    assert "team 'vision' has $2.00 left of its $100.00 monthly budget (spent $98.00)" in out
    assert "GPUJobs that exist" not in out, "the whole ledger was read"
    assert await gpujob_names() == []


async def test_a_users_running_job_on_another_cluster_counts_against_its_hourly_cap(
    api: KubeApi,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On Kubernetes the user is the namespace: user ml runs $50/h on cluster prod-us, its whole cap."""
    monkeypatch.setenv(URL_ENV, database_url)
    (tmp_path / "home" / "config.yaml").write_text("budgets: {users: {ml: {hourly_usd: 50}}}\n")
    job = "name: small\ncommand: train.py\nresources: {gpu_types: [A10G], nodes: 1}\n"
    code, out = await submit(capsys, tmp_path, job)
    assert code == 0, out  # nothing running anywhere: within the cap

    now = datetime.now(UTC)
    record_external_job(
        database_url,
        _row("uid-far", "ml", "ml", "prod-us", JobStatus.RUNNING, now),
        [_segment(now, 50.0, None)],
    )
    code, out = await submit(capsys, tmp_path, job.replace("small", "second"))
    assert code == 2, out
    assert "user 'ml' runs $50.00/h; job 'second' adds $" in out and "above its $50.00/h cap" in out
    assert await gpujob_names() == ["small"]


async def test_without_a_database_a_refusal_says_it_saw_only_the_namespaces_gpujobs(
    api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    (tmp_path / "home" / "config.yaml").write_text("budgets: {teams: {ml: 155}}\n")
    code, out = await submit(capsys, tmp_path, H100_JOB.format(name="first"))
    assert code == 0, out
    start = month_window(datetime.now(UTC)).start  # what the operator wrote: $150 in 10 s
    segment = {"start": start.isoformat(), "end": (start + timedelta(seconds=10)).isoformat(), "nodes": 1,
               "nodePriceUsdPerHour": 54000.0}  # fmt: skip
    await asyncio.to_thread(
        client.patch_gpujob_status, "first", "ml", {"state": "SUCCEEDED", "segments": [segment]}
    )

    code, out = await submit(capsys, tmp_path, H100_JOB.format(name="big"))
    assert code == 2, out
    assert "team 'ml' has $5.00 left of its $155.00 monthly budget (spent $150.00)" in out
    assert "spend counted from the GPUJobs that exist in namespace ml only" in out
    assert "without a ledger database" in out
    code, out = await submit(
        capsys, tmp_path, H100_JOB.format(name="capped") + "market: {max_hourly_usd: 1}\n"
    )
    assert code == 2 and "above its max_hourly_usd $1.00/h" in out, out
    assert "GPUJobs that exist" not in out, "a refusal that no spend made says nothing of spend"


# --- the cluster's zones -----------------------------------------------------------------------
CATALOG = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
    "azure,Standard_ND96isr_H100_v5,H100,8,80,192,2048,98.0,9.0,eastus,\n"
    "gcp,a3-highgpu-8g,H100,8,80,192,2048,88.0,10.0,us-central1,us-central1-a\n"
    "aws,p5.48xlarge,H100,8,80,192,2048,98.0,13.0,us-west-2,usw2-az1\n"
    "aws,p5.48xlarge,H100,8,80,192,2048,98.0,20.0,us-east-1,use1-az1\n"
    "aws,p5.48xlarge,H100,8,80,192,2048,98.0,21.0,us-east-1,use1-az2\n"
)


def gpu_node(zone: str, letter: str) -> dict[str, Any]:
    labels = {
        "topology.kubernetes.io/zone": f"us-east-1{letter}",
        "topology.k8s.aws/zone-id": zone,
        "topology.kubernetes.io/region": "us-east-1",
        "karpenter.sh/capacity-type": "on-demand",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-{zone}", "labels": labels}}


@pytest_asyncio.fixture
async def two_zones(api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KubeApi:
    """GPU nodes in two AWS zones (use1-az1, use1-az2); a price catalog of three clouds."""
    catalog = tmp_path / "prices.csv"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(catalog))
    monkeypatch.delenv(URL_ENV, raising=False)
    for zone, letter in (("use1-az1", "a"), ("use1-az2", "b")):
        await api.call(api.core.create_node, gpu_node(zone, letter))
    return api


async def test_a_job_allowing_no_zone_the_cluster_has_is_refused_naming_them(
    two_zones: KubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await submit(
        capsys, tmp_path, H100_JOB.format(name="west") + "market: {regions: [us-west-2]}\n"
    )
    assert code == 2, out
    assert "job 'west': the cluster has none of the zones it allows (usw2-az1)" in out
    assert "the cluster has use1-az1, use1-az2 (on-demand and spot: GPU nodes)" in out and "To fix" in out
    code, out = await submit(capsys, tmp_path, H100_JOB.format(name="gcp") + "market: {cloud: gcp}\n")
    assert code == 2 and "none of the zones it allows (us-central1-a)" in out, out
    assert await gpujob_names() == []

    code, out = await submit(
        capsys, tmp_path, H100_JOB.format(name="east") + "market: {regions: [us-east-1]}\n"
    )
    assert code == 0 and "note:" not in out, out
    assert await gpujob_names() == ["east"]


def _forbidden(message: str) -> Any:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": "Forbidden", "code": 403}  # fmt: skip
    return kmock.Response(status=403, payload=body)


@pytest.mark.parametrize(
    ("path", "what"),
    [("/api/v1/nodes", "nodes"), ("/apis/karpenter.sh/v1/nodepools", "Karpenter NodePools")],
)
async def test_an_account_that_may_not_list_the_clusters_zones_gets_a_note_and_the_operators_check(
    two_zones: KubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, what: str
) -> None:
    two_zones.emulator["get", re.compile(re.escape(path) + r"$")] << _forbidden(f"{what} is forbidden")
    code, out = await submit(
        capsys, tmp_path, H100_JOB.format(name="west") + "market: {regions: [us-west-2]}\n"
    )
    assert code == 0, out
    assert (
        f"note: the cluster's zones are not checked before the GPUJob is created: this account may not list {what}"
        in out
    )
    assert await gpujob_names() == ["west"]
