"""Hostile GPUJob names and pods that are not the job's, against the real operator on kmock.

Derived pod and Service names must be valid and distinct; the operator only ever counts, adopts or
deletes pods carrying the job's label and owned by that very GPUJob (ownerReferences uid)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client as k8s
import pytest

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from tests.operators.kubernetes.operator_cluster import (
    NS,
    RUNNING,
    Cluster,
    condition,
    create_job,
    gpujob,
    job_when,
    pods_when,
    set_pod_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def owned_by(pod: dict[str, Any], job: str) -> bool:
    return [r["uid"] for r in pod["metadata"].get("ownerReferences") or []] == [f"uid-{job}"]


def assert_valid_names(objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        meta = obj["metadata"]
        assert len(meta["name"]) <= 63 and DNS_1035_LABEL.fullmatch(meta["name"]), meta["name"]
        assert all(len(v) <= 63 for v in meta["labels"].values()), meta["labels"]


async def services(cluster: Cluster) -> list[dict[str, Any]]:
    listing = await cluster.call(cluster.core.list_namespaced_service, NS)
    return [cluster.api.sanitize_for_serialization(s) for s in listing.items]


async def delete_job(cluster: Cluster, name: str) -> None:
    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, name)

    async def gone() -> bool:
        try:
            await cluster.job(name)
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    await cluster.wait_for(f"GPUJob {name} deleted", gone)


async def test_long_names_with_a_common_prefix_keep_their_own_pods(cluster: Cluster) -> None:
    prefix = "a" * 59 + "-"
    first, second = prefix + "x", prefix + "second-job-past-63-chars"  # 61 and 84 characters
    await create_job(cluster, first, 2)
    await create_job(cluster, second, 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 4)
    assert_valid_names(pods)
    assert len({p["metadata"]["name"] for p in pods}) == 4
    mine = {job: [p for p in pods if owned_by(p, job)] for job in (first, second)}
    assert [len(ps) for ps in mine.values()] == [2, 2]
    svcs = await services(cluster)
    assert_valid_names(svcs)
    assert len({s["metadata"]["name"] for s in svcs}) == 2
    for job in (first, second):
        for p in mine[job]:
            await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    for job in (first, second):
        await job_when(cluster, job, lambda st: st.get("state") == "RUNNING" and st.get("nodes") == 2)

    # The first one finishes, then goes: the second one's pods and Service stay, and it stays RUNNING.
    for p in mine[first]:
        await set_pod_status(cluster, p["metadata"]["name"], {"phase": "Succeeded"})
    await job_when(cluster, first, lambda st: st.get("state") == "SUCCEEDED")
    await delete_job(cluster, first)
    left = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert sorted(p["metadata"]["name"] for p in left) == sorted(p["metadata"]["name"] for p in mine[second])
    assert [s["metadata"]["name"] for s in await services(cluster)] == [
        s["metadata"]["name"] for s in svcs if s["metadata"]["annotations"]["gpuctl.dev/job-name"] == second
    ]
    await cluster.operator_passes(3)  # several reconciles of the second job
    status = (await cluster.job(second))["status"]
    assert (status["state"], status["nodes"], status["attempt"]) == ("RUNNING", 2, 1), status


@pytest.mark.parametrize("name", ["my.job.v1", "1job"])
async def test_names_that_are_no_service_names_get_valid_derived_ones(cluster: Cluster, name: str) -> None:
    await create_job(cluster, name, 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert_valid_names(pods)
    (svc,) = await services(cluster)
    assert_valid_names([svc])
    assert {p["spec"]["subdomain"] for p in pods} == {svc["metadata"]["name"]}
    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    await job_when(cluster, name, lambda st: st.get("state") == "RUNNING")


async def test_an_unusable_name_fails_once_with_the_reason(cluster: Cluster) -> None:
    body = gpujob("Bad_Name", 1)  # the API server refuses it; an emulator or an old server may not
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job = await job_when(cluster, "Bad_Name", lambda st: st.get("state") == "FAILED")
    status = job["status"]
    assert status["failureReason"] == "invalid_spec"
    assert "metadata.name" in status["message"] and "To fix" in status["message"]
    assert condition(status, "Failed")["message"] == status["message"]
    await cluster.operator_passes(3)  # reconciles go on: nothing changes, nothing is created
    assert (await cluster.job("Bad_Name"))["status"] == status
    assert await cluster.pods() == [] and await services(cluster) == []


async def test_device_env_fails_the_job_and_user_is_the_namespace(cluster: Cluster) -> None:
    body = gpujob("devs", 1)
    body["spec"]["env"] = {"NVIDIA_VISIBLE_DEVICES": "all"}
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job = await job_when(cluster, "devs", lambda st: st.get("state") == "FAILED")
    assert "spec.env" in job["status"]["message"] and "NVIDIA_VISIBLE_DEVICES" in job["status"]["message"]

    body = gpujob("spoof", 1)
    body["spec"]["user"] = "someone-else"
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job = await job_when(cluster, "spoof", lambda st: st.get("state") == "LAUNCHING")
    assert job["status"]["user"] == NS


async def test_a_foreign_pod_with_the_would_be_name_is_not_adopted_nor_deleted(cluster: Cluster) -> None:
    stranger = {"apiVersion": "v1", "kind": "ReplicaSet", "name": "x", "uid": "someone-else"}
    meta = {"name": "f-n0", "namespace": NS, "labels": {"gpuctl.dev/job": "f"}, "ownerReferences": [stranger]}
    await cluster.call(cluster.core.create_namespaced_pod, NS, {"metadata": meta})
    await create_job(cluster, "f", 2)
    job = await job_when(cluster, "f", lambda st: st.get("state") == "FAILED")
    status = job["status"]
    assert status["failureReason"] == "backend_error"
    assert "f-n0 already exists and does not belong to job f" in status["message"]

    async def only_the_strangers_pod_left() -> bool:  # none of the job's pods or Service left behind
        pods = await cluster.pods()
        owners = [(p["metadata"]["name"], p["metadata"]["ownerReferences"][0]["uid"]) for p in pods]
        return owners == [("f-n0", "someone-else")] and await services(cluster) == []

    await cluster.wait_for("only the stranger's pod left", only_the_strangers_pod_left)
    await delete_job(cluster, "f")
    assert [p["metadata"]["name"] for p in await cluster.pods()] == ["f-n0"]


async def test_a_foreign_pod_with_the_jobs_label_is_not_counted_nor_deleted(cluster: Cluster) -> None:
    await create_job(cluster, "g", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    await set_pod_status(cluster, "g-n0", RUNNING)
    await job_when(cluster, "g", lambda st: st.get("state") == "RUNNING")
    labels = {"gpuctl.dev/job": "g", "gpuctl.dev/attempt": "0"}  # an old attempt's, it claims
    await cluster.call(
        cluster.core.create_namespaced_pod, NS, {"metadata": {"name": "g-x", "labels": labels}}
    )
    await set_pod_status(cluster, "g-n0", {"phase": "Failed", "reason": "Evicted"})
    job = await job_when(cluster, "g", lambda st: st.get("attempt") == 2)  # not held by "draining" g-x
    assert job["status"]["preemptions"] == 1
    await pods_when(cluster, lambda ps: sorted(p["metadata"]["name"] for p in ps) == ["g-n0", "g-x"])
    await delete_job(cluster, "g")
    assert [p["metadata"]["name"] for p in await cluster.pods()] == ["g-x"]
