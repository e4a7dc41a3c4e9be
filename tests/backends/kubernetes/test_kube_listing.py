"""The pod and node listings the operator's passes share: one LIST for many passes, never one older than
a job's previous read nor than its own writes; and a create from a listing that missed a pod makes no
second pod of a node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.manifests import LABEL_ATTEMPT, LABEL_JOB, job_label
from orchestrator.errors import TemporaryError
from orchestrator.testing.kube_api import KubeApi


def pod(job: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_JOB: job_label(job)},
            "ownerReferences": [{"uid": uid}],
        }
    }


class Cluster:
    """The namespace's pods and the nodes, and how many LISTs were made of each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pods: list[dict[str, Any]] = []
        self.nodes = {"n1"}
        self.pod_lists = self.node_lists = self.pool_lists = 0
        monkeypatch.setattr(client, "list_gpuctl_pods", self.list_pods)
        monkeypatch.setattr(client, "list_nodes", self.list_nodes)
        monkeypatch.setattr(client, "list_node_pools", self.list_pools)

    def list_pods(self, namespace: str, api: Any) -> list[dict[str, Any]]:
        assert namespace == "ns"
        self.pod_lists += 1
        return list(self.pods)

    def list_nodes(self, api: Any) -> list[dict[str, Any]]:
        self.node_lists += 1
        return [{"metadata": {"name": n}} for n in sorted(self.nodes)]

    def list_pools(self, api: Any) -> list[dict[str, Any]]:
        self.pool_lists += 1
        return [{"metadata": {"name": "gpu"}}]


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_one_listing_serves_every_job_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, view = Cluster(monkeypatch), ClusterView()
    cluster.pods = [pod("a", "a-0", "ua"), pod("b", "b-0", "ub"), pod("b", "b-x", "other-gpujob")]
    for _ in range(3):  # three rounds of passes of a and b
        for job in ("a", "b"):
            view.begin(job, "ns")  # a pass begins (what the operator's handlers do first)
        assert names(view.job_pods("a", "ns", "ua", None)) == ["a-0"]
        assert names(view.job_pods("b", "ns", "ub", None)) == ["b-0"]  # owned by that GPUJob only
        assert view.node_names("a", "ns", None) == view.node_names("b", "ns", None) == {"n1"}
        assert view.node_pools("a", "ns", None) == view.node_pools("b", "ns", None) != []
    assert (cluster.pod_lists, cluster.node_lists, cluster.pool_lists) == (3, 3, 3)  # one per round
    cluster.nodes = {"n2"}
    assert view.node_names("a", "ns", None) == {"n1"}  # the same pass: the listing it read
    view.begin("a", "ns")
    assert view.node_names("a", "ns", None) == {"n2"}  # a read its listing: its next pass lists anew


def test_a_job_sees_its_own_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, view = Cluster(monkeypatch), ClusterView()
    assert view.job_pods("a", "ns", "ua", None) == []
    view.job_pods("b", "ns", "ub", None)
    view.job_pods("b", "ns", "ub", None)  # a listing a has not read yet, fetched before a's write
    cluster.pods = [pod("a", "a-0", "ua")]  # a's pass creates its pod
    view.wrote("a", "ns")
    assert names(view.job_pods("a", "ns", "ua", None)) == ["a-0"]
    assert cluster.pod_lists == 3


def test_a_failed_list_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, view = Cluster(monkeypatch), ClusterView()

    def failing(namespace: str, api: Any) -> list[dict[str, Any]]:
        raise OSError("the API server is away")

    monkeypatch.setattr(client, "list_gpuctl_pods", failing)
    with pytest.raises(OSError):
        view.job_pods("a", "ns", "ua", None)
    monkeypatch.setattr(client, "list_gpuctl_pods", cluster.list_pods)
    cluster.pods = [pod("a", "a-0", "ua")]
    assert names(view.job_pods("a", "ns", "ua", None)) == ["a-0"]


def _pod_of(attempt: int) -> dict[str, Any]:
    labels = {LABEL_JOB: job_label("j"), LABEL_ATTEMPT: str(attempt)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "j-n0", "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "trainer", "image": "example.com/train:1"}]}}  # fmt: skip


@pytest.mark.asyncio
async def test_a_pod_name_held_by_an_older_attempt_is_no_creation() -> None:
    """A pass that listed the pods before another attempt's pod was made tries to create it: the
    same attempt's pod counts as created, an older attempt's holding the name is retried later."""
    async with KubeApi() as kube:
        api = client.api_client_for(kube.url)
        await asyncio.to_thread(client.create_pod, _pod_of(1), api, None)
        await asyncio.to_thread(client.create_pod, _pod_of(1), api, None)  # the same: created
        with pytest.raises(TemporaryError, match="older attempt"):
            await asyncio.to_thread(client.create_pod, _pod_of(2), api, None)
        assert kube.requests()["POST pods"] == 3
