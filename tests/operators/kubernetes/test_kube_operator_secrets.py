"""Secret references in a GPUJob, against the real operator on kmock: a ``{secret, key}`` reference
becomes the trainer's ``secretKeyRef`` (the operator never reads the Secret); ``from_env`` cannot
reach a pod and fails the job once, creating nothing."""

from __future__ import annotations

import pytest

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from tests.operators.kubernetes.operator_cluster import (
    NS,
    Cluster,
    gpujob,
    job_when,
    pods_when,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator


async def test_a_secret_reference_becomes_a_secret_key_ref(cluster: Cluster) -> None:
    body = gpujob("sec", 1)
    body["spec"]["env"] = {"MODE": "fast", "HF_TOKEN": {"secret": "hf", "key": "token"}}
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    (pod,) = await pods_when(cluster, lambda pods: len(pods) == 1)
    trainer = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
    env = {e["name"]: e for e in trainer["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert env["MODE"] == {"name": "MODE", "value": "fast"}


async def test_from_env_fails_the_job_once_with_the_fix(cluster: Cluster) -> None:
    body = gpujob("fromenv", 1)
    body["spec"]["env"] = {"WANDB_API_KEY": {"from_env": "WANDB_API_KEY"}}
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)
    job = await job_when(cluster, "fromenv", lambda st: st.get("state") == "FAILED")
    status = job["status"]
    assert status["failureReason"] == "invalid_spec"
    assert (
        "is not available on Kubernetes" in status["message"] and "kubectl create secret" in status["message"]
    )
    await cluster.operator_passes(3)  # reconciles go on: nothing is created
    assert await cluster.pods() == []
