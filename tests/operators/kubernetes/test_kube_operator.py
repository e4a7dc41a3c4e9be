"""The real operator (kopf handlers, kubernetes client) against kmock's HTTP emulator of the API."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml

from operators.kubernetes.reconcile import reconcile_job
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV, KubeConfig
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.monitor.samples import read_sample_ticks
from orchestrator.monitor.summary import WindowAggregator, unavailable_record
from orchestrator.state.gpu_usage import NO_NVML_MESSAGE, aggregate, usage_window
from tests.controller.test_admission import OVER_BUDGET_JOB
from tests.operators.kubernetes.operator_cluster import (
    NS,
    RUNNING,
    Cluster,
    condition,
    create_job,
    gpujob,
    handlers,
    job_when,
    names,
    pods_when,
    posted_events,
    set_pod_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

REPLAY = Path(__file__).resolve().parents[2] / "data" / "monitor" / "h100x8_synthetic.jsonl"


async def test_create_makes_pods_with_placement_and_sidecar(cluster: Cluster) -> None:
    await create_job(cluster, "a", 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert names(pods) == ["a-n0", "a-n1"]
    pod = next(p for p in pods if p["metadata"]["name"] == "a-n0")
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    exprs = {e["key"]: e for e in terms[0]["matchExpressions"]}
    assert "NVIDIA-H100-80GB-HBM3" in exprs["nvidia.com/gpu.product"]["values"]
    assert exprs["karpenter.sh/capacity-type"]["values"] == ["spot"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    trainer = spec["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert spec["terminationGracePeriodSeconds"] == 45
    assert spec["initContainers"][0]["name"] == "monitor"
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "GPUJob"
    services = await cluster.call(cluster.core.list_namespaced_service, NS)
    assert [s.metadata.name for s in services.items] == ["a-rdzv"]

    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    job = await job_when(cluster, "a", lambda st: st.get("state") == "RUNNING")
    assert job["status"]["nodes"] == 2
    assert condition(job["status"], "Running")["status"] == "True"
    assert condition(job["status"], "Placed")["reason"] == "Placed"


async def test_evicted_pod_recovers_the_job(cluster: Cluster) -> None:
    await create_job(cluster, "b", 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    await job_when(cluster, "b", lambda st: st.get("state") == "RUNNING")
    await set_pod_status(cluster, "b-n1", {"phase": "Failed", "reason": "Evicted"})

    job = await job_when(cluster, "b", lambda st: st.get("attempt") == 2)
    assert job["status"]["preemptions"] == 1
    assert condition(job["status"], "Preempted")["status"] == "True"
    assert job["status"]["segments"][0]["endReason"] == "preempted"
    pods = await pods_when(
        cluster,
        lambda ps: len(ps) == 2 and all(p["metadata"]["labels"]["gpuctl.dev/attempt"] == "2" for p in ps),
    )
    assert names(pods) == ["b-n0", "b-n1"]


async def test_lost_node_rescales_an_elastic_job(cluster: Cluster) -> None:
    for node in ("node-1", "node-2", "node-3"):
        await cluster.call(cluster.core.create_node, {"metadata": {"name": node}})
    await create_job(cluster, "c", {"min": 2, "max": 3})
    pods = await pods_when(cluster, lambda ps: len(ps) == 3)
    for i, p in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING, node=f"node-{i + 1}")
    await job_when(cluster, "c", lambda st: st.get("state") == "RUNNING" and st.get("nodes") == 3)
    await cluster.call(cluster.core.delete_node, "node-3")

    job = await job_when(cluster, "c", lambda st: condition(st, "Rescaled") is not None)
    status = job["status"]
    assert status["desiredNodes"] == 2 and status["nodes"] == 2 and status["attempt"] == 1
    assert condition(status, "Rescaled")["status"] == "True"
    assert [s["nodes"] for s in status["segments"]] == [3, 2]
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert names(pods) == ["c-n0", "c-n1"]


async def test_all_pods_succeeded_finishes_the_job(cluster: Cluster) -> None:
    await create_job(cluster, "d", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    await set_pod_status(cluster, "d-n0", RUNNING)
    await job_when(cluster, "d", lambda st: st.get("state") == "RUNNING")
    await set_pod_status(cluster, "d-n0", {"phase": "Succeeded"})
    job = await job_when(cluster, "d", lambda st: st.get("state") == "SUCCEEDED")
    assert condition(job["status"], "Succeeded")["status"] == "True"
    assert job["status"]["costUsd"] >= 0


async def test_delete_cleans_up_pods_and_service(cluster: Cluster) -> None:
    await create_job(cluster, "e", 2)
    await pods_when(cluster, lambda ps: len(ps) == 2)
    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "e")

    async def no_pods() -> bool:
        return not await cluster.pods()

    await cluster.wait_for("no pods", no_pods)

    async def no_services() -> bool:  # the operator deletes the pods first, then the Service
        return not (await cluster.call(cluster.core.list_namespaced_service, NS)).items

    await cluster.wait_for("no rendezvous Service", no_services)

    async def gone() -> bool:
        try:
            await cluster.job("e")
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    await cluster.wait_for("GPUJob e deleted (finalizer released)", gone)


def monitor_lines(end_ago_s: float) -> list[tuple[float, str]]:
    """The replay summarised by the real window code in 10 s windows, shifted to end ``end_ago_s``
    before now: (window end, the JSON line the sidecar prints at about that time)."""
    ticks = list(read_sample_ticks(REPLAY))
    shift = time.time() - end_ago_s - ticks[-1][0].time
    aggregator = WindowAggregator(window_s=10.0, interval_s=1.0, job_id="g")
    lines = []
    for tick in ticks:
        finished = aggregator.add([replace(s, time=s.time + shift) for s in tick])
        if finished:
            lines.append((float(finished["end"]), json.dumps(finished, separators=(",", ":"))))
    return lines


def usage_of(lines_by_pod: dict[str, list[tuple[float, str]]]) -> dict[str, Any]:
    windows = [
        usage_window(pod, json.loads(line)) for pod, lines in lines_by_pod.items() for _, line in lines
    ]
    usage = aggregate(windows)
    assert usage is not None
    return {k: v for k, v in usage.to_dict().items() if v is not None}


async def test_gpu_usage_from_monitor_logs_counts_each_window_once_across_restarts(cluster: Cluster) -> None:
    await create_job(cluster, "g", 2)
    await pods_when(cluster, lambda ps: len(ps) == 2)
    lines = monitor_lines(end_ago_s=5.0)
    assert len(lines) == 11
    cluster.logs.write(NS, "g-n0", "monitor", "gpuctl monitor: serving /metrics on 0.0.0.0:9400")
    for end, line in lines[:6]:
        cluster.logs.write(NS, "g-n0", "monitor", line, at=end)
    for end, line in lines[:3]:
        cluster.logs.write(NS, "g-n1", "monitor", line, at=end)
    cluster.logs.write(NS, "g-n0", "trainer", lines[7][1])  # not the monitor's: never read
    for p in ("g-n0", "g-n1"):
        await set_pod_status(cluster, p, RUNNING)

    want = usage_of({"g-n0": lines[:6], "g-n1": lines[:3]})
    assert want["monitors"] == 2 and want["windows"] == 9
    job = await job_when(cluster, "g", lambda st: (st.get("gpuUsage") or {}).get("windows") == 9)
    assert job["status"]["gpuUsage"] == want

    # Many reconciles re-read the last minute of each log and count nothing again.
    await cluster.operator_passes(3)
    assert (await cluster.job("g"))["status"]["gpuUsage"] == want

    # A restarted operator knows only what the API server has: reconcile with a fresh client and
    # nothing in memory, between kopf's reconciles (its per-job lock). kopf itself is not restarted:
    # kmock's server stops answering in this event loop once kopf's watch streams are cut.
    for end, line in lines[6:]:
        cluster.logs.write(NS, "g-n0", "monitor", line, at=end)
    want = usage_of({"g-n0": lines, "g-n1": lines[:3]})

    def fresh_reconcile() -> None:
        with handlers._locks[(NS, "g")]:
            reconcile_job("g", NS, KubeConfig(), datetime.now(UTC), client.api_client_for(cluster.url))

    for _ in range(3):
        await cluster.call(fresh_reconcile)
    assert (await cluster.job("g"))["status"]["gpuUsage"] == want and want["windows"] == 14
    await cluster.operator_passes(3)  # and kopf's reconciles after it
    job = await cluster.job("g")
    assert job["status"]["gpuUsage"] == want
    ends = {m["monitor"]: m["lastWindowEnd"] for m in job["status"]["gpuMonitors"]}
    assert ends == {"g-n0/attempt-1": lines[-1][0], "g-n1/attempt-1": lines[2][0]}

    asked = [r for r in cluster.logs.requests if r["pod"] == "g-n0"]
    assert asked and all(r["container"] == "monitor" for r in asked)
    assert "sinceSeconds" not in asked[0] and all("sinceSeconds" in r for r in asked[-3:])
    assert all(int(r["sinceSeconds"]) < 200 for r in asked[-3:])  # not the whole log again


async def test_monitor_without_nvml_leaves_a_message_and_no_usage(cluster: Cluster) -> None:
    await create_job(cluster, "h", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    record = unavailable_record("h", "no_nvml", "NVML Shared Library Not Found")
    cluster.logs.write(NS, "h-n0", "monitor", json.dumps(record))
    await set_pod_status(cluster, "h-n0", RUNNING)
    job = await job_when(cluster, "h", lambda st: "gpuMonitorMessage" in st)
    assert job["status"]["gpuMonitorMessage"] == NO_NVML_MESSAGE and "gpuUsage" not in job["status"]


async def test_unreadable_monitor_log_is_read_later_without_losing_windows(cluster: Cluster) -> None:
    await create_job(cluster, "k", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    lines = monitor_lines(end_ago_s=5.0)[:4]
    for end, line in lines:
        cluster.logs.write(NS, "k-n0", "monitor", line, at=end)
    cluster.logs.failing.add("k-n0")
    await set_pod_status(cluster, "k-n0", RUNNING)
    await job_when(cluster, "k", lambda st: st.get("state") == "RUNNING")  # the reconcile goes on
    await cluster.operator_passes(3)
    assert sum(r["pod"] == "k-n0" for r in cluster.logs.requests) >= 2
    assert "gpuUsage" not in (await cluster.job("k"))["status"]
    cluster.logs.failing.clear()
    job = await job_when(cluster, "k", lambda st: "gpuUsage" in st)
    assert job["status"]["gpuUsage"] == usage_of({"k-n0": lines})


async def test_over_budget_gpujob_fails_once_with_one_event(cluster: Cluster) -> None:
    """The job every backend refuses (tests/controller/test_admission.py), applied straight to the
    cluster: the operator's admission fails it before any pod, says why once, and leaves it FAILED."""
    body = gpujob("capped", 1)
    body["spec"] = {**yaml.safe_load(OVER_BUDGET_JOB), "image": "example.com/train:1"}
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)

    job = await job_when(cluster, "capped", lambda st: st.get("state") == "FAILED")
    status = job["status"]
    assert status["failureReason"] == "over_budget"
    assert "above its max_hourly_usd $1.00/h" in status["message"]
    failed = condition(status, "Failed")
    assert failed is not None and failed["status"] == "True" and failed["reason"] == "OverBudget"

    async def refusal_events() -> list[dict[str, Any]]:
        return [e for e in posted_events(cluster, "capped") if "over_budget" in e.get("message", "")]

    [event] = await cluster.wait_for("the refusal's Event", refusal_events)
    assert event["message"].startswith("FAILED (over_budget): job 'capped' would cost $")

    # Further reconciles (kopf's timer, and one with nothing in memory) leave it as it is.
    seen = cluster.job_passes("capped")

    async def reconciled_again() -> bool:
        return cluster.job_passes("capped") >= seen + 3

    await cluster.wait_for("three more reconciles", reconciled_again)
    assert await cluster.call(
        reconcile_job, "capped", NS, KubeConfig(), datetime.now(UTC), client.api_client_for(cluster.url)
    ) is None  # fmt: skip
    assert (await cluster.job("capped"))["status"] == status
    assert len(await refusal_events()) == 1 and await cluster.pods() == []


async def test_team_budget_in_the_cost_config_refuses_at_admission(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "costs.yaml"
    # the chart's budgets, mounted: unlisted teams (such as "default") share $100,000 a month, and
    # namespace default may charge vision too
    config.write_text(
        "budgets: {teams: {vision: 10}, other_teams_monthly_usd: 100000, namespace_teams: {default: [default, vision]}}\n"
    )
    monkeypatch.setenv(COST_CONFIG_ENV, str(config))
    body = gpujob("vision-big", 1)  # 8 H100 on spot: more than $10 an hour
    body["spec"]["team"] = "vision"
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job = await job_when(cluster, "vision-big", lambda st: st.get("state") == "FAILED")
    assert job["status"]["failureReason"] == "over_budget"
    assert "team 'vision' has $10.00 left of its $10.00 monthly budget" in job["status"]["message"]
    await create_job(cluster, "other-team", 1)  # team default: the unlisted teams' shared budget
    await pods_when(cluster, lambda ps: names(ps) == ["other-team-n0"])


def progress_line(at: float, step: int, **record: Any) -> str:
    """A progress record as the sidecar prints it (``--progress-file``)."""
    when = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return PROGRESS_LINE_PREFIX + json.dumps({"time": when, "step": step, **record})


async def test_progress_lines_in_the_monitor_log_give_status_progress_and_success(cluster: Cluster) -> None:
    await create_job(cluster, "p", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    now = time.time()
    window_end, window = monitor_lines(end_ago_s=5.0)[0]
    cluster.logs.write(NS, "p-n0", "monitor", window, at=window_end)
    for i in range(3):  # written after the attempt began (its segment opened when the pod was created)
        line = progress_line(now + i / 10, 10 * (i + 1), total_steps=100, loss=1.0 / (i + 1), world_size=8)
        cluster.logs.write(NS, "p-n0", "monitor", line, at=now)
    await set_pod_status(cluster, "p-n0", RUNNING)
    job = await job_when(cluster, "p", lambda st: st.get("state") == "RUNNING" and "progress" in st)
    progress = job["status"]["progress"]
    assert (progress["step"], progress["totalSteps"], progress["worldSize"], progress["finished"]) == (
        30,
        100,
        8,
        False,
    )
    assert condition(job["status"], "Running")["message"] == "training at step 30 on 1 node(s)"
    assert job["status"]["gpuUsage"]["windows"] == 1  # the same log read gave the GPU window

    # Re-reads (sinceSeconds reaches back) change nothing; a finished record then the pod's exit: success.
    await cluster.operator_passes(3)
    assert (await cluster.job("p"))["status"]["progress"] == progress
    done = progress_line(time.time(), 100, event="finished", metrics={"accuracy": 0.97})
    cluster.logs.write(NS, "p-n0", "monitor", done)
    job = await job_when(cluster, "p", lambda st: (st.get("progress") or {}).get("finished") is True)
    await set_pod_status(cluster, "p-n0", {"phase": "Succeeded"})
    job = await job_when(cluster, "p", lambda st: st.get("state") == "SUCCEEDED")
    assert job["status"]["progress"]["step"] == 100 and job["status"]["progress"]["metrics"] == {
        "accuracy": 0.97
    }
    assert job["status"]["gpuUsage"]["windows"] == 1
    reads = [r for r in cluster.logs.requests if r["pod"] == "p-n0"]
    assert all(r["container"] == "monitor" for r in reads)
