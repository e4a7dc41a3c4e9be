"""The real operator on kmock: a GPUJob with a Kueue queue gets one pod group per attempt.

kmock runs no Kueue webhook or controller: the pods are checked as created, ungated."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.backends.kubernetes.manifests import pod_group_name
from tests.operators.kubernetes.operator_cluster import (
    NS,
    RUNNING,
    Cluster,
    gpujob,
    job_when,
    pods_when,
    set_pod_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"


def of_attempt(pods: list[dict[str, Any]], attempt: int) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["labels"]["gpuctl.dev/attempt"] == str(attempt)]


async def test_each_attempt_is_one_kueue_pod_group_of_its_size(cluster: Cluster) -> None:
    body = gpujob("k", {"min": 2, "max": 3})
    body["spec"]["queue"] = "team-a"
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    pods = await pods_when(cluster, lambda ps: len(of_attempt(ps, 1)) == 3)
    first = pod_group_name("k", 1, "uid-k")
    for p in pods:
        meta = p["metadata"]
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert meta["labels"][GROUP_LABEL] == first
        assert meta["annotations"][COUNT_ANNOTATION] == "3"  # the attempt's nodes, not the spec's min
        assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "true"

    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    await job_when(cluster, "k", lambda st: st.get("state") == "RUNNING")
    await set_pod_status(cluster, "k-n1", {"phase": "Failed"})  # a crash: the job restarts

    # The next attempt's pods form a new group (Kueue admits it anew, under the queue's quota).
    job = await job_when(cluster, "k", lambda st: st.get("attempt") == 2)
    size = len(job["status"]["attemptNodes"])
    again = await pods_when(cluster, lambda ps: len(ps) == size and len(of_attempt(ps, 2)) == size)
    groups = {p["metadata"]["labels"][GROUP_LABEL] for p in again}
    counts = {p["metadata"]["annotations"][COUNT_ANNOTATION] for p in again}
    assert groups == {pod_group_name("k", 2, "uid-k")} and first not in groups
    assert counts == {str(size)}
