"""`gpuctl cancel --backend kubernetes`: the GPUJob is marked (``spec.cancel``) and the operator cancels
it through the engine, as local and SLURM jobs are cancelled; the GPUJob and its cost stay."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from operators.kubernetes.step import step
from orchestrator.backends.kubernetes.crd import CANCEL_FIELD, GROUP, PLURAL, VERSION, gpujob_crd
from orchestrator.backends.kubernetes.gpujob import cancel_requested, job_spec
from orchestrator.cli.main import main
from tests.cli.test_kube_jobs_cli import use_emulator
from tests.operators.kubernetes.operator_cluster import (
    NS,
    Cluster,
    job_when,
    start_running,
)
from tests.operators.kubernetes.test_kube_step import ON_DEMAND, SPOT, T0, condition, job, pod, run, running


def test_the_cancel_mark_is_a_crd_field_and_no_job_spec_field() -> None:
    spec = gpujob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"][CANCEL_FIELD]["type"] == "boolean"
    body = {"command": "t.py", CANCEL_FIELD: True}
    assert cancel_requested(body) and not cancel_requested({"command": "t.py", CANCEL_FIELD: "yes"})
    assert job_spec("j", "ml", body).command == "t.py"  # the operator reads the job spec beside it


def test_cancel_stops_the_pods_closes_the_segment_and_ends_cancelled() -> None:
    spec = job(2)
    status = running(spec, 2)
    pods = [pod("j-n0", 1), pod("j-n1", 1)]
    d = run(spec, status, pods, timedelta(hours=1))  # not cancelled: it runs on
    assert d.status["state"] == "RUNNING" and not d.stop
    cancelled = step(spec, status, pods, None, (SPOT, ON_DEMAND), "j", T0, T0 + timedelta(hours=1),
                     cancel_requested=True)  # fmt: skip
    assert cancelled.status["state"] == "CANCELLED"
    assert set(cancelled.stop) == {"j-a1-n0", "j-a1-n1"}  # the pods deleted: their grace is the notice's
    segment = cancelled.status["segments"][-1]
    assert segment["end"] is not None and segment["endReason"] == "cancelled"
    assert cancelled.status["costUsd"] == 20.0  # 2 nodes x 1 h x $10, kept in the status
    assert condition(cancelled.status, "Cancelled")["status"] == "True"
    assert any(m.startswith("CANCELLED") for m in cancelled.events)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.asyncio
@pytest.mark.slow  # the real kopf operator against an API emulator
async def test_cancel_a_running_gpujob_keeps_it_with_its_cost(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_emulator(tmp_path, cluster.url, monkeypatch)
    await start_running(cluster, "stopme", 2)

    k = ("--backend", "kubernetes", "--namespace", NS)
    code, out = await asyncio.to_thread(_cli, capsys, "cancel", "stopme", *k)
    assert code == 0 and "cancel requested for gpujob/stopme" in out
    marked = await cluster.job("stopme")
    assert marked["spec"][CANCEL_FIELD] is True

    job_now = await job_when(cluster, "stopme", lambda st: st.get("state") == "CANCELLED")

    async def no_pods() -> bool:
        return not await cluster.pods()

    await cluster.wait_for("the pods stopped", no_pods)  # stopped by the engine, the GPUJob kept
    status = job_now["status"]
    assert [s["endReason"] for s in status["segments"]] == ["cancelled"]
    assert status["segments"][0]["end"] and status["costUsd"] > 0
    assert condition(status, "Cancelled")["status"] == "True"

    code, out = await asyncio.to_thread(_cli, capsys, "status", "stopme", *k, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["state"] == "CANCELLED" and doc["cost_usd"] > 0 and len(doc["segments"]) == 1
    code, out = await asyncio.to_thread(_cli, capsys, "cancel", "stopme", *k)
    assert code == 0 and "job stopme already ended (CANCELLED)" in out
    assert (await cluster.job("stopme"))["status"]["state"] == "CANCELLED"  # still there


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_gpujob_cancelled_before_the_operator_saw_it_never_gets_pods(cluster: Cluster) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "metadata": {"name": "never", "namespace": NS},
        "spec": {"command": "t.py", "resources": {"gpu_types": ["H100"], "nodes": 1}, CANCEL_FIELD: True},
    }
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job_now = await job_when(cluster, "never", lambda st: st.get("state") == "CANCELLED")
    assert not job_now["status"].get("segments") and await cluster.pods() == []
