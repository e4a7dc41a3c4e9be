"""`gpuctl submit/list/status/cancel --backend kubernetes` against kmock's emulated API server.

The real `kubernetes` client loads a real kubeconfig; only the API server is emulated.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.gpu_usage import MonitorLedger
from orchestrator.cli.main import main
from orchestrator.state.gpu_usage import NO_NVML_MESSAGE
from orchestrator.testing.kube_api import KubeApi
from tests.cli.test_gpu_usage_cli import window
from tests.controller.test_admission import OVER_BUDGET_JOB


def use_emulator(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig naming the emulator at ``url``, made the one the client reads."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: emu, cluster: {{server: '{url.rstrip('/')}'}}}}]\n"
        "users: [{name: me, user: {}}]\ncontexts: [{name: test, context: {cluster: emu, user: me}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


@pytest_asyncio.fixture
async def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    async with KubeApi(namespace="ml") as api:  # the testing kit's API emulator
        yield use_emulator(tmp_path, api.url, monkeypatch)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.asyncio
async def test_gpujob_lifecycle_through_the_cli(
    kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: trainer\ncommand: train.py\nresources: {gpu_types: [H100], gpus_per_node: 8, nodes: 2}\n"
    )
    k = ("--backend", "kubernetes", "--namespace", "ml")
    code, out = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 0 and "gpujob/trainer created in namespace ml" in out

    # what the operator would write into .status
    status = {"state": "RUNNING", "attempt": 2, "preemptions": 1, "nodes": 2, "costUsd": 12.5,
              "segments": [{"start": "2026-11-22T10:00:00+00:00", "end": "2026-11-22T11:00:00+00:00", "nodes": 2,
                            "gpuType": "H100", "market": "spot", "nodePriceUsdPerHour": 6.25}]}  # fmt: skip
    await asyncio.to_thread(client.patch_gpujob_status, "trainer", "ml", status)

    code, out = await asyncio.to_thread(_cli, capsys, "status", "trainer", *k, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["state"] == "RUNNING" and doc["attempts"] == 2 and doc["preemptions"] == 1
    assert doc["cost_usd"] == 12.5 and doc["segments"][0]["cost_usd"] == 12.5
    code, out = await asyncio.to_thread(_cli, capsys, "list", *k, "-o", "json")
    assert [d["name"] for d in json.loads(out)] == ["trainer"]

    code, out = await asyncio.to_thread(_cli, capsys, "cancel", "trainer", *k)
    assert code == 0 and "cancel requested for gpujob/trainer" in out  # the operator cancels it
    assert (await asyncio.to_thread(client.get_gpujob, "trainer", "ml"))["spec"]["cancel"] is True
    code, out = await asyncio.to_thread(_cli, capsys, "status", "trainer", *k, "-o", "json")
    assert code == 0 and json.loads(out)["cost_usd"] == 12.5, "a cancelled GPUJob is kept with its cost"


@pytest.mark.asyncio
async def test_status_shows_the_gpu_use_the_operator_wrote(
    kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: measured\ncommand: train.py\nresources: {gpu_types: [A10G], nodes: 1}\n")
    k = ("--backend", "kubernetes", "--namespace", "ml")
    code, _ = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 0
    code, out = await asyncio.to_thread(_cli, capsys, "status", "measured", *k, "-o", "json")
    assert json.loads(out)["gpu_usage"] is None

    # the status fields the operator writes after reading these two windows from a monitor's log
    # (the windows of tests/cli/test_gpu_usage_cli.py, whose local job shows the same line)
    ledger = MonitorLedger()
    assert ledger.take("measured-n0/uid-1", window(0.0, 40.0, 3.0) + window(10.0, 60.0, 0.6)) == 2
    status = {"state": "RUNNING", "attempt": 1, "nodes": 1, **ledger.status_fields()}
    await asyncio.to_thread(client.patch_gpujob_status, "measured", "ml", status)

    code, out = await asyncio.to_thread(_cli, capsys, "status", "measured", *k, "-o", "json")
    usage = json.loads(out)["gpu_usage"]
    assert code == 0 and usage["samples"] == 40 and usage["windows"] == 2 and usage["monitors"] == 1
    assert (
        usage["util_mean_pct"] == 50.0 and usage["util_p95_pct"] == 65.0 and usage["sm_activity_mean"] == 0.5
    )
    code, out = await asyncio.to_thread(_cli, capsys, "status", "measured", *k)
    assert "GPU use: utilization mean 50% (p95 65%), peak memory 25% of 24 GiB, SM activity 0.50" in out

    # without SM activity the operator leaves the field out; the document still has it, as null
    no_sm = {k2: v for k2, v in status["gpuUsage"].items() if k2 != "sm_activity_mean"}
    await asyncio.to_thread(client.patch_gpujob_status, "measured", "ml", {"gpuUsage": None})
    await asyncio.to_thread(client.patch_gpujob_status, "measured", "ml", {"gpuUsage": no_sm})
    code, out = await asyncio.to_thread(_cli, capsys, "status", "measured", *k, "-o", "json")
    usage = json.loads(out)["gpu_usage"]
    assert "sm_activity_mean" in usage and usage["sm_activity_mean"] is None and usage["samples"] == 40


@pytest.mark.asyncio
async def test_status_shows_why_nothing_was_measured(
    kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: blind\ncommand: train.py\n")
    k = ("--backend", "kubernetes", "--namespace", "ml")
    await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    status = {"state": "RUNNING", "gpuMonitorMessage": NO_NVML_MESSAGE}
    await asyncio.to_thread(client.patch_gpujob_status, "blind", "ml", status)
    code, out = await asyncio.to_thread(_cli, capsys, "status", "blind", *k)
    assert code == 0 and f"GPU use: not measured ({NO_NVML_MESSAGE})" in out and "utilization mean" not in out


@pytest.mark.asyncio
async def test_the_over_budget_job_is_refused_and_no_gpujob_created(
    kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job every backend refuses (tests/controller/test_admission.py), priced by the catalog the
    operator uses: refused before the API server is asked to create anything."""
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    job = tmp_path / "job.yaml"
    job.write_text(OVER_BUDGET_JOB)
    k = ("--backend", "kubernetes", "--namespace", "ml")
    code, out = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 2 and "above its max_hourly_usd $1.00/h" in out and "To fix" in out, out
    assert "GPUJobs that exist" not in out, "no spend was involved"
    assert await asyncio.to_thread(client.list_gpujobs, "ml") == []

    job.write_text("name: p\ncommand: train.py\nmarket: {policy: nope}\n")
    code, out = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 2 and "unknown market policy 'nope'" in out
    assert await asyncio.to_thread(client.list_gpujobs, "ml") == []


@pytest.mark.asyncio
async def test_team_budget_counts_the_costs_in_the_teams_gpujobs(
    kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    (home / "config.yaml").write_text("budgets: {teams: {vision: 100}, namespace_teams: {ml: [vision]}}\n")
    k = ("--backend", "kubernetes", "--namespace", "ml")
    job = tmp_path / "job.yaml"
    job.write_text("name: first\nteam: vision\ncommand: train.py\nresources: {gpu_types: [A10G], nodes: 1}\n")
    code, _ = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 0, "nothing spent yet"
    # what the operator wrote: $99.75 of the team's $100 this month (10 s from its start at $35,910/h);
    # an hour of A10G spot costs more than the $0.25 left
    start = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    segment = {"start": start.isoformat(), "end": (start + timedelta(seconds=10)).isoformat(), "nodes": 1,
               "gpuType": "A10G", "market": "on-demand", "nodePriceUsdPerHour": 35910.0}  # fmt: skip
    await asyncio.to_thread(
        client.patch_gpujob_status, "first", "ml", {"state": "SUCCEEDED", "segments": [segment]}
    )

    job.write_text(job.read_text().replace("name: first", "name: second"))
    code, out = await asyncio.to_thread(_cli, capsys, "submit", str(job), *k, "--detach")
    assert code == 2, out
    assert "team 'vision' has $0.25 left of its $100.00 monthly budget (spent $99.75)" in out
    assert [j["metadata"]["name"] for j in await asyncio.to_thread(client.list_gpujobs, "ml")] == ["first"]
