"""`gpuctl cost report --backend kubernetes` without a ledger database: the GPUJobs that exist, read
into the records the job store gives a report, against kmock's emulated API server; every format says
that deleted GPUJobs are missing."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.crd import API_VERSION
from orchestrator.backends.kubernetes.ledger import DELETED_MISSING_NOTE, gpujob_ledger
from orchestrator.cli.cost_cmd import of_backend
from orchestrator.cli.main import main
from orchestrator.costs.inputs import ReportInputs
from orchestrator.costs.report import build_report
from orchestrator.testing.kube_api import KubeApi
from tests.cli.test_kube_jobs_cli import use_emulator

HOUR = "2026-11-20T1{}:00:00Z"


def gpujob(namespace: str, name: str, team: str, segments: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUJob",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": HOUR.format(0)},
        "spec": {"command": "t.py", "team": team},
        "status": {"state": "SUCCEEDED", "attempt": len(segments), "user": namespace, "segments": segments},
    }


def segment(start: int, end: int, nodes: int, price: float, market: str = "spot") -> dict[str, Any]:
    return {"start": HOUR.format(start), "end": HOUR.format(end), "attempt": 1, "nodes": nodes, "gpuType": "H100",
            "market": market, "gpusPerNode": 8, "nodePriceUsdPerHour": price,
            "onDemandNodePriceUsdPerHour": 40.0}  # fmt: skip


JOBS = [
    gpujob("ml", "a", "research", [segment(0, 2, 2, 10.0), segment(2, 3, 1, 40.0, "on-demand")]),  # 40 + 40
    gpujob("vision", "b", "vision", [segment(0, 1, 1, 10.0)]),  # 10
]


def test_gpujobs_become_the_records_a_report_reads() -> None:
    source = gpujob_ledger(JOBS, "prod-eu")
    jobs, segments = source.list_jobs(), source.segments()
    assert [(j.id, j.user, j.team, j.namespace, j.cluster, j.backend) for j in jobs] == [
        ("ml/a", "ml", "research", "ml", "prod-eu", "kubernetes"),
        ("vision/b", "vision", "vision", "vision", "prod-eu", "kubernetes"),
    ]
    assert [(s.job_id, s.market, s.nodes, s.gpus_per_node) for s in segments] == [
        ("ml/a", "spot", 2, 8), ("ml/a", "on-demand", 1, 8), ("vision/b", "spot", 1, 8)
    ]  # fmt: skip
    assert len({s.id for s in segments}) == 3
    now = datetime(2026, 11, 21, tzinfo=UTC)
    by_ns = build_report(jobs, segments, now, None, "namespace")
    assert {r.name: r.cost_usd for r in by_ns.rows} == {"ml": 80.0, "vision": 10.0}
    by_cluster = build_report(jobs, segments, now, None, "cluster")
    assert [(r.name, r.cost_usd, r.jobs) for r in by_cluster.rows] == [("prod-eu", 90.0, 2)]


@pytest_asyncio.fixture
async def cluster_with_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[KubeApi]:
    async with KubeApi(namespace="ml") as api:
        use_emulator(tmp_path, api.url, monkeypatch)  # its current context is named "test"
        monkeypatch.delenv("GPUCTL_CLUSTER_NAME", raising=False)
        for body in JOBS:
            meta = body["metadata"]
            created = {k: v for k, v in body.items() if k != "status"}
            await api.call(api.custom.create_namespaced_custom_object, "gpuctl.dev", "v1alpha1",
                           meta["namespace"], "gpujobs", created)  # fmt: skip
            await asyncio.to_thread(
                client.patch_gpujob_status, meta["name"], meta["namespace"], body["status"]
            )
        yield api


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["cost", "report", "--backend", "kubernetes", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


@pytest.mark.asyncio
async def test_report_by_namespace_cluster_and_team_from_the_gpujobs(
    cluster_with_jobs: KubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(await asyncio.to_thread(_report, capsys, "--by", "namespace", "-o", "json"))
    assert {r["name"]: r["totalCost"] for r in doc["rows"]} == {"ml": 80.0, "vision": 10.0}
    assert doc["notes"][0] == DELETED_MISSING_NOTE
    doc = json.loads(await asyncio.to_thread(_report, capsys, "--by", "cluster", "-o", "json"))
    assert [(r["name"], r["totalCost"]) for r in doc["rows"]] == [("test", 90.0)]  # the context's name
    doc = json.loads(await asyncio.to_thread(_report, capsys, "--by", "market", "-n", "ml", "-o", "json"))
    assert {r["name"]: r["totalCost"] for r in doc["rows"]} == {"spot": 40.0, "on-demand": 40.0}
    doc = json.loads(await asyncio.to_thread(_report, capsys, "--by", "job", "-o", "json"))
    assert {r["name"] for r in doc["rows"]} == {"ml/a", "vision/b"}


@pytest.mark.asyncio
async def test_every_format_says_deleted_gpujobs_are_missing(
    cluster_with_jobs: KubeApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCTL_CLUSTER_NAME", "prod-eu")
    table = await asyncio.to_thread(_report, capsys, "--by", "team")
    assert "deleted GPUJobs" in " ".join(table.split())  # the caption, however it wraps
    rows = list(
        csv.reader(io.StringIO(await asyncio.to_thread(_report, capsys, "-o", "csv", "--by", "cluster")))
    )
    assert rows[0][0] == "cluster" and rows[1][0] == "prod-eu" and rows[2][0] == "TOTAL"
    assert rows[-1] == [f"# note: {DELETED_MISSING_NOTE}"]
    html = await asyncio.to_thread(_report, capsys, "-o", "html")
    assert "deleted GPUJobs and their cost are missing" in html


def test_namespace_needs_the_kubernetes_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "report", "-n", "ml"]) == 2
    assert "--namespace names GPUJobs" in capsys.readouterr().err


def test_a_job_store_report_of_one_backend_keeps_its_jobs_and_segments() -> None:
    source = gpujob_ledger(JOBS, "prod-eu")
    jobs = [source.jobs[0], dataclasses.replace(source.jobs[1], backend="slurm")]
    only = of_backend(ReportInputs(jobs=jobs, segments=list(source.segments())), "slurm")
    assert [j.id for j in only.jobs] == ["vision/b"] and [s.job_id for s in only.segments] == ["vision/b"]
