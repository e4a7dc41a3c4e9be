"""Training pods as a good citizen of Kueue (one pod group per attempt) and Karpenter (do-not-disrupt).

Only the manifests are checked here (and against the Kubernetes schema): no Kueue or Karpenter
controller runs in these tests."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import (
    KARPENTER_DO_NOT_DISRUPT,
    Owner,
    build_pod,
    pod_group_name,
)
from orchestrator.errors import InternalError, SpecError, UserError
from orchestrator.spec import JobSpec, load_spec_text
from tests.backends.kubernetes.test_kube_manifests import KUBE_VERSION, placement, spec

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def pod(
    job_spec: JobSpec,
    config: KubeConfig | None = None,
    *,
    job: str = "llm",
    attempt: int = 2,
    node_index: int = 1,
    attempt_nodes: int | None = 3,
    uid: str | None = "u-1",
) -> dict[str, Any]:
    return build_pod(
        job_spec,
        placement(),
        job=job,
        namespace="ml",
        attempt=attempt,
        node_index=node_index,
        config=config or KubeConfig(),
        owner=Owner(job, uid) if uid is not None else None,
        attempt_nodes=attempt_nodes,
    )


def kueue_keys(meta: dict[str, Any]) -> dict[str, str]:
    both = {**meta["labels"], **meta["annotations"]}
    return {k: v for k, v in both.items() if k.startswith("kueue.x-k8s.io/")}


def test_a_queue_makes_each_attempt_one_pod_group() -> None:
    p = pod(spec(queue="team-a"), attempt=2, attempt_nodes=3)
    kubernetes_validate.validate(p, KUBE_VERSION, strict=True)
    meta = p["metadata"]
    group = pod_group_name("llm", 2, "u-1")
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == group
    assert kueue_keys(meta) == {
        "kueue.x-k8s.io/queue-name": "team-a",
        "kueue.x-k8s.io/pod-group-name": group,
        "kueue.x-k8s.io/pod-group-total-count": "3",
        # A failed pod is never replaced within its group (the next attempt is a new group).
        "kueue.x-k8s.io/retriable-in-group": "false",
        # One role for the whole attempt, whatever differs between its pods (the node-index label).
        "kueue.x-k8s.io/role-hash": "trainer",
    }
    # Kueue's webhook adds (and on admission removes) its scheduling gate; gpuctl adds none.
    assert "schedulingGates" not in p["spec"]
    # The group's members agree on everything Kueue compares; the next attempt is another group.
    other_node = pod(spec(queue="team-a"), attempt=2, node_index=0, attempt_nodes=3)
    assert kueue_keys(other_node["metadata"]) == kueue_keys(meta)
    next_attempt = pod(spec(queue="team-a"), attempt=3, node_index=1, attempt_nodes=2)
    assert next_attempt["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] != group
    assert next_attempt["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"


def test_without_a_queue_no_kueue_metadata() -> None:
    p = pod(spec())
    assert kueue_keys(p["metadata"]) == {}
    assert kueue_keys(pod(spec(), attempt_nodes=None)["metadata"]) == {}  # no group size needed either


def test_the_chart_default_queue_and_the_spec_overriding_it() -> None:
    config = KubeConfig(kueue_queue="shared")
    assert pod(spec(), config)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "shared"
    assert pod(spec(queue="team-a"), config)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_a_queued_pod_without_its_attempt_size_is_a_bug_not_a_guess() -> None:
    with pytest.raises(InternalError, match="attempt size"):
        pod(spec(queue="team-a"), attempt_nodes=None)


def test_group_names_are_valid_and_distinct_per_job_attempt_and_gpujob() -> None:
    jobs = ["llm", "a" * 253, "a" * 252 + "b", "9.starts.with.digit", "x"]
    names = {pod_group_name(j, a, uid) for j in jobs for a in (1, 2, 10) for uid in ("u-1", "u-2", None)}
    assert len(names) == len(jobs) * 3 * 3
    for name in names:
        assert len(name) <= 63 and DNS_1035_LABEL.fullmatch(name), name
    # A GPUJob deleted and created again under its name does not meet its predecessor's Workload.
    assert pod_group_name("llm", 1, "u-1") != pod_group_name("llm", 1, "u-2")
    assert pod_group_name("llm", 1, None) == "llm-a1"


@pytest.mark.parametrize("job", ["a" * 253, "my.job.v1", "0-digit-first"])
def test_long_and_dotted_job_names_still_make_valid_queued_pods(job: str) -> None:
    p = pod(spec(queue="q"), job=job)
    kubernetes_validate.validate(p, KUBE_VERSION, strict=True)
    assert all(len(v) <= 63 for v in p["metadata"]["labels"].values())


def test_training_pods_ask_karpenter_not_to_disrupt_them() -> None:
    p = pod(spec())
    assert p["metadata"]["annotations"][KARPENTER_DO_NOT_DISRUPT] == "true"
    kubernetes_validate.validate(p, KUBE_VERSION, strict=True)
    off = pod(spec(), KubeConfig(karpenter_do_not_disrupt=False))
    assert KARPENTER_DO_NOT_DISRUPT not in off["metadata"]["annotations"]


@pytest.mark.parametrize("queue", ["Team-A", "team_a", "-a", "a-", "a.b", "q" * 64, ""])
def test_a_bad_queue_name_is_refused_naming_the_field(queue: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(f"name: a\ncommand: x\nqueue: '{queue}'\n", "job.yaml")
    message = str(err.value)
    assert "queue (line 3)" in message and "LocalQueue" in message and "To fix" in message


def test_a_good_queue_name_is_kept() -> None:
    assert load_spec_text("name: a\ncommand: x\nqueue: team-a\n", "job.yaml").queue == "team-a"
    assert load_spec_text("name: a\ncommand: x\n", "job.yaml").queue is None


def test_a_bad_chart_default_queue_is_refused() -> None:
    with pytest.raises(UserError, match="kueueQueue"):
        KubeConfig.from_dict({"kueue_queue": "Not A Queue"})
