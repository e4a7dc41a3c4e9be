"""Crash safety of the operator: a pass killed anywhere between its status patch and its pods leaves a
status from which the next pass makes exactly one pod per node (an in-memory API, no server)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from operators.kubernetes.reconcile import reconcile_job, status_patch
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import KubeConfig

NOW = datetime(2026, 3, 1, tzinfo=UTC)


class Crash(Exception):
    """The operator process dying at this call."""


class FakeApi:
    """One GPUJob, its pods and Service, kept as the API server would (merge patches of the status)."""

    def __init__(self, nodes: int) -> None:
        spec = {"command": "t.py", "image": "example.com/t:1", "market": {"mode": "spot"},
                "resources": {"gpu_types": ["H100"], "gpus_per_node": 8, "nodes": nodes}}  # fmt: skip
        self.job: dict[str, Any] = {"metadata": {"name": "j", "uid": "uid-j"}, "spec": spec, "status": {}}
        self.pods: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.crash_at: dict[str, int] = {}
        """Call name -> which call of it (0: the next) raises :class:`Crash`."""

    def _maybe_crash(self, call: str) -> None:
        left = self.crash_at.get(call)
        if left is not None:
            self.crash_at[call] = left - 1
            if left == 0:
                raise Crash(call)

    def get_gpujob(self, name: str, namespace: str, api: Any = None) -> dict[str, Any]:
        return copy.deepcopy(self.job)

    def patch_gpujob_status(self, name: str, namespace: str, patch: dict[str, Any], api: Any = None) -> None:
        self._maybe_crash("patch")
        status = self.job["status"]
        for key, value in copy.deepcopy(patch).items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value

    def list_job_pods(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.pods.values()))

    def create_pod(self, pod: dict[str, Any], api: Any = None, owner_uid: str | None = None) -> None:
        self._maybe_crash("create")
        name = pod["metadata"]["name"]
        if name not in self.pods:  # an existing pod of the job's is fine (client.create_pod)
            self.pods[name] = {**pod, "metadata": {**pod["metadata"], "uid": f"pod-{len(self.created)}"}}
            self.created.append(name)

    def delete_pod(
        self, name: str, namespace: str, grace_s: Any = None, api: Any = None, uid: Any = None
    ) -> None:
        if name in self.pods and (uid is None or self.pods[name]["metadata"]["uid"] == uid):
            del self.pods[name]

    def set_phase(self, phase: str) -> None:
        for pod in self.pods.values():
            pod["status"] = {"phase": phase}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    api = FakeApi(nodes=2)
    for call in ("get_gpujob", "patch_gpujob_status", "list_job_pods", "create_pod", "delete_pod"):
        monkeypatch.setattr(client, call, getattr(api, call))
    monkeypatch.setattr(client, "list_nodes", lambda api=None: None)
    monkeypatch.setattr(client, "list_node_pools", lambda api=None: [])
    monkeypatch.setattr(client, "read_container_log", lambda *a, **k: "")
    monkeypatch.setattr(client, "ensure_service", lambda *a, **k: None)
    monkeypatch.setattr(client, "delete_service", lambda *a, **k: None)
    yield api


def reconcile(at: timedelta = timedelta()) -> None:
    reconcile_job("j", "default", KubeConfig(), NOW + at)


def launches(fake: FakeApi) -> list[str]:
    return [n["launch"] for n in fake.job["status"]["attemptNodes"]]


@pytest.mark.parametrize(
    "crash_at",
    [
        {"create": 0},  # after the status patch, before any pod
        {"create": 1},  # after the first pod of two
        {"patch": 1},  # after the pods, before they are recorded launched
    ],
)
def test_a_crash_after_the_status_patch_ends_with_one_pod_per_node(
    fake: FakeApi, crash_at: dict[str, int]
) -> None:
    fake.crash_at = dict(crash_at)
    with pytest.raises(Crash):
        reconcile()
    assert fake.job["status"]["state"] == "LAUNCHING" and fake.job["status"]["attempt"] == 1
    assert len(fake.pods) < 2 or "launched" not in launches(fake)  # the crash left work undone

    reconcile(timedelta(seconds=10))
    assert sorted(fake.pods) == ["j-n0", "j-n1"] and sorted(fake.created) == ["j-n0", "j-n1"]
    assert launches(fake) == ["launched", "launched"]
    assert {p["metadata"]["labels"]["gpuctl.dev/attempt"] for p in fake.pods.values()} == {"1"}

    fake.set_phase("Running")
    reconcile(timedelta(seconds=20))
    reconcile(timedelta(seconds=30))
    assert fake.job["status"]["state"] == "RUNNING" and fake.job["status"]["nodes"] == 2
    assert sorted(fake.created) == ["j-n0", "j-n1"]  # never a second pod for a node


def test_the_status_is_written_before_any_pod(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []
    create, patch = fake.create_pod, fake.patch_gpujob_status

    def create_pod(pod: dict[str, Any], api: Any = None, owner_uid: str | None = None) -> None:
        seen.append(("create", len(fake.job["status"].get("attemptNodes", []))))
        create(pod, api, owner_uid)

    def patch_status(name: str, namespace: str, patch_: dict[str, Any], api: Any = None) -> None:
        seen.append(("patch", len(fake.pods)))
        patch(name, namespace, patch_, api)

    monkeypatch.setattr(client, "create_pod", create_pod)
    monkeypatch.setattr(client, "patch_gpujob_status", patch_status)
    reconcile()
    # the nodes are in the status (as intents) before the first pod; recorded launched after the last
    assert seen == [("patch", 0), ("create", 2), ("create", 2), ("patch", 2)]


def test_ended_nodes_left_running_by_a_crash_are_deleted(fake: FakeApi) -> None:
    reconcile()
    fake.set_phase("Running")
    reconcile(timedelta(seconds=10))
    fake.pods["j-n1"]["status"] = {"phase": "Failed", "reason": "Evicted"}
    fake.crash_at = {"patch": 0}
    with pytest.raises(Crash):  # dies before writing the preemption: nothing was deleted yet
        reconcile(timedelta(minutes=5))
    assert sorted(fake.pods) == ["j-n0", "j-n1"]
    fake.crash_at = {}
    # Ended in the status but the pods not deleted (a crash right after the patch): the next pass
    # deletes them before it does anything else.
    status = dict(fake.job["status"])
    nodes = [{**n, "launch": "ended"} for n in status["attemptNodes"]]
    fake.patch_gpujob_status("j", "default", status_patch(status, {**status, "attemptNodes": nodes}))
    fake.job["status"]["state"] = "PREEMPTED"
    reconcile(timedelta(minutes=6))  # (this API deletes at once: the pass goes on to attempt 2)
    assert fake.job["status"]["attempt"] == 2 and sorted(fake.pods) == ["j-n0", "j-n1"]
    assert {p["metadata"]["labels"]["gpuctl.dev/attempt"] for p in fake.pods.values()} == {"2"}
    assert sorted(fake.created) == ["j-n0", "j-n0", "j-n1", "j-n1"]  # one pod per node of each attempt
