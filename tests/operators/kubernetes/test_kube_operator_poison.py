"""A poisoned GPUJob on the testing kit's simulated cluster, under the real kopf operator on a fake clock
(issue 29): a trainer's progress line ``{"step": 1e400}`` (infinity), or any unexpected exception in one
job's pass, never freezes that job with its pods alive and its budget unenforced, and the other jobs go
on as they would have."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from operators.kubernetes.step import iso
from orchestrator.backends.kubernetes import intake
from orchestrator.backends.kubernetes.gpu_usage import read_monitor_logs
from orchestrator.backends.kubernetes.manifests import MONITOR
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import SimulatedKubeCluster
from tests.operators.kubernetes.operator_cluster import gpujob, posted_events
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

ZONE = "us-central1-a"
CATALOG = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
    "gcp,a3-highgpu-8g,H100,8,80,208,1872,88.0,25.0,us-central1,us-central1-a\n"
)
BUDGET_USD = 880.0
"""Ten hours of one on-demand node at $88/h."""
JOBS = ("poisoned", "injected", "clean")


@pytest_asyncio.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SimulatedKubeCluster]:
    """Three on-demand nodes, the chart's price catalog, the operator on the cluster's clock; one pass
        of GPUJob ``injected`` meets an unexpected exception once its pod runs (a bug, independent of any
    data)."""
    catalog = tmp_path / "prices.csv"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(catalog))

    def broken_for_injected(
        status: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *args: Any
    ) -> dict[str, str]:
        if any(str(p["metadata"]["name"]).startswith("injected-") and _running(p) for p in pods):
            raise KeyError("a bug in gpuctl")
        return read_monitor_logs(status, pods, *args)

    monkeypatch.setattr(intake, "read_monitor_logs", broken_for_injected)  # where a pass reads them
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    async with SimulatedKubeCluster(clock, on_demand_nodes={ZONE: 3}) as sim:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", sim.url)
        monkeypatch.setattr(handlers, "clock", sim.operator_clock)
        await sim.start_operator()
        yield sim


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def budgeted(name: str, now: datetime) -> dict[str, Any]:
    body = gpujob(name, 1)
    body["metadata"]["creationTimestamp"] = iso(now)
    body["spec"]["market"] = {"mode": "on-demand"}
    body["spec"]["goals"] = {"budget_usd": BUDGET_USD}
    return body


async def statuses(cluster: SimulatedKubeCluster) -> dict[str, dict[str, Any]]:
    return {str(j["metadata"]["name"]): dict(j.get("status") or {}) for j in await cluster.jobs()}


async def pod_names(cluster: SimulatedKubeCluster) -> set[str]:
    return {str(p["metadata"]["name"]) for p in await cluster.pods()}


async def test_a_poisoned_gpujob_fails_or_ignores_the_line_and_its_budget_holds_the_others_go_on(
    cluster: SimulatedKubeCluster,
) -> None:
    for name in JOBS:
        await cluster.create_job(budgeted(name, cluster.clock.now()))
    await cluster.settle()
    assert await pod_names(cluster) >= {"poisoned-n0", "clean-n0"}
    poison = (
        PROGRESS_LINE_PREFIX + json.dumps({"time": cluster.clock.now().isoformat()})[:-1] + ', "step": 1e400}'
    )
    cluster.logs.write(cluster.namespace, "poisoned-n0", MONITOR, poison)
    await cluster.settle()

    # The injected bug: FAILED (internal_error) through the engine, its pod deleted, one Event saying why.
    now = await statuses(cluster)
    injected = now["injected"]
    assert (injected["state"], injected["failureReason"]) == ("FAILED", "internal_error"), injected
    assert "KeyError" in injected["message"] and all(s.get("end") for s in injected["segments"])
    assert not {n for n in await pod_names(cluster) if n.startswith("injected-")}
    assert any(
        "could not handle this job" in e.get("message", "") for e in posted_events(cluster, "injected")
    )
    # The poisoned line: the same end, or the line ignored (the job runs on, its progress finite).
    early = now["poisoned"]
    if early["state"] == "FAILED":
        assert early["failureReason"] == "internal_error" and "poisoned-n0" not in await pod_names(cluster)
    else:
        assert early["state"] == "RUNNING", early
    assert now["clean"]["state"] == "RUNNING"

    for hour, hours in zip((3, 6, 9, 10, 11), (3, 3, 3, 1, 1), strict=True):
        await cluster.advance(hours * 3600)
        for name in await pod_names(cluster):
            cluster.write_progress(name, 100 * hour, total_steps=10_000)
        await cluster.settle()
        now = await statuses(cluster)
        if hour < 10:
            assert now["clean"]["state"] == "RUNNING", (hour, now["clean"])  # unaffected by the others
        for status in now.values():  # every budget holds: nothing runs, or is billed, past its budget
            assert status["state"] == "FAILED" or status["costUsd"] < BUDGET_USD, (hour, status)

    clean, poisoned = now["clean"], now["poisoned"]
    assert (clean["state"], clean["failureReason"]) == ("FAILED", "over_budget")
    assert clean["costUsd"] == BUDGET_USD and clean["progress"]["step"] == 1000
    assert poisoned["state"] == "FAILED" and poisoned["failureReason"] in ("internal_error", "over_budget")
    assert poisoned["costUsd"] <= BUDGET_USD
    json.dumps(poisoned, allow_nan=False)
    assert await pod_names(cluster) == set()  # every job ended: none is billed any more
