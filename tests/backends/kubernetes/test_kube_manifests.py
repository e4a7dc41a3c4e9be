"""Pod and Service builders: valid Kubernetes objects carrying the placement, limits and contract."""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

import kubernetes_validate
import pytest

from orchestrator import contract
from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import (
    INTAKE_TOKEN_KEY,
    Owner,
    build_intake_secret,
    build_pod,
    build_service,
    derived_name,
    intake_secret_name,
    trainer_argv,
)
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.monitor import push
from orchestrator.monitor.app import add_monitor_arguments
from orchestrator.spec import JobSpec

KUBE_VERSION = "1.33"


def placement(market: MarketKind = MarketKind.SPOT, gpu: str = "H100") -> Placement:
    return Placement(gpu, market, "aws", "us-east-1", "us-east-1a", "p5.48xlarge", 8, 30.0, 98.3, "test")


def spec(**over: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": "llm",
        "command": "train.py --lr 0.1",
        "resources": {
            "gpu_types": ["H100", "A100-80GB"],
            "gpus_per_node": 8,
            "nodes": {"min": 2, "max": 4},
            "cpus_per_node": 90,
            "memory_gib_per_node": 900,
        },
        "checkpoint": {"notice_grace_seconds": 110.5, "every_steps": 50},
        "env": {"FOO": "bar"},
        "policies": {"global_batch": 1024},
    }
    data.update(over)
    return JobSpec.model_validate(data)


def pod(
    job: JobSpec, config: KubeConfig | None = None, market: MarketKind = MarketKind.SPOT
) -> dict[str, Any]:
    return build_pod(
        job,
        placement(market),
        job="llm",
        namespace="ml",
        attempt=2,
        node_index=1,
        config=config or KubeConfig(),
        owner=Owner("llm", "u-1"),
    )


def required_exprs(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {e["key"]: e for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}


@pytest.mark.parametrize("provider", ["karpenter", "eks", "gke", "aks"])
@pytest.mark.parametrize("market", [MarketKind.SPOT, MarketKind.ON_DEMAND])
def test_pods_are_valid_kubernetes_objects(provider: str, market: MarketKind) -> None:
    p = pod(spec(), KubeConfig(capacity_provider=provider), market)
    kubernetes_validate.validate(p, KUBE_VERSION, strict=True)


def test_the_monitor_alone_gets_the_intake_token_from_the_jobs_secret() -> None:
    """With the operator's intake configured: the monitor's push environment (the token from the
    GPUJob's Secret, optional so a pod never waits for it), none of it for the trainer; the Secret
    is owned by the GPUJob. Both valid Kubernetes objects."""
    p = pod(spec(), KubeConfig(intake_url="http://gpuctl-intake.gpuctl.svc:8081"))
    kubernetes_validate.validate(p, KUBE_VERSION, strict=True)
    (monitor,) = p["spec"]["initContainers"]
    env = {e["name"]: e for e in monitor["env"]}
    assert env[push.ENV_INTAKE_URL]["value"] == "http://gpuctl-intake.gpuctl.svc:8081"
    assert env[push.ENV_INTAKE_TOKEN]["valueFrom"]["secretKeyRef"] == {
        "name": intake_secret_name("llm"), "key": INTAKE_TOKEN_KEY, "optional": True}  # fmt: skip
    assert env[push.ENV_JOB_UID]["value"] == "u-1"
    assert env[push.ENV_POD_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    (trainer,) = p["spec"]["containers"]
    pushed = {
        push.ENV_INTAKE_URL,
        push.ENV_INTAKE_TOKEN,
        push.ENV_JOB_UID,
        push.ENV_POD_NAME,
        push.ENV_POD_UID,
    }
    assert pushed <= set(env) and not {e["name"] for e in trainer["env"]} & pushed
    secret = build_intake_secret(Owner("llm", "u-1"), "ml", "t0ken")
    kubernetes_validate.validate(secret, KUBE_VERSION, strict=True)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    without = pod(spec())["spec"]["initContainers"][0]["env"]
    assert not [e for e in without if e["name"].startswith("GPUCTL_INTAKE")]


def test_service_is_headless_and_valid() -> None:
    svc = build_service("llm", "ml", KubeConfig(), Owner("llm", "u-1"))
    kubernetes_validate.validate(svc, KUBE_VERSION, strict=True)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True


def test_gpu_affinity_limits_and_grace() -> None:
    p = pod(spec())
    exprs = required_exprs(p)
    products = exprs["nvidia.com/gpu.product"]["values"]
    assert "NVIDIA-H100-80GB-HBM3" in products and "NVIDIA-A100-SXM4-80GB" in products
    assert exprs["karpenter.sh/capacity-type"] == {
        "key": "karpenter.sh/capacity-type",
        "operator": "In",
        "values": ["spot"],
    }
    trainer = p["spec"]["containers"][0]
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "90", "memory": "921600Mi"}
    assert p["spec"]["terminationGracePeriodSeconds"] == 111
    assert p["spec"]["restartPolicy"] == "Never"
    assert p["metadata"]["ownerReferences"][0] == {
        "apiVersion": "gpuctl.dev/v1alpha1",
        "kind": "GPUJob",
        "name": "llm",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_on_demand_on_gke_excludes_spot_nodes_and_spot_tolerates_the_taint() -> None:
    gke = KubeConfig(capacity_provider="gke")
    on_demand = pod(spec(), gke, MarketKind.ON_DEMAND)
    assert required_exprs(on_demand)["cloud.google.com/gke-spot"]["operator"] == "NotIn"
    spot = pod(spec(), gke, MarketKind.SPOT)
    assert {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in spot["spec"]["tolerations"]
    assert required_exprs(spot)["cloud.google.com/gke-spot"]["values"] == ["true"]
    eks = pod(spec(), KubeConfig(capacity_provider="eks"), MarketKind.ON_DEMAND)
    assert required_exprs(eks)["eks.amazonaws.com/capacityType"]["values"] == ["ON_DEMAND"]


def test_contract_environment_and_pvc_checkpoints() -> None:
    p = pod(spec())
    env = {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_JOB_ID] == "llm"
    assert env[contract.ENV_ATTEMPT] == "2"
    assert env[contract.ENV_NODE_ID] == "llm-n1"
    assert env[contract.ENV_CHECKPOINT_DIR] == "/checkpoints/llm"
    assert env[contract.ENV_CHECKPOINT_EVERY_STEPS] == "50"
    assert env[contract.ENV_GLOBAL_BATCH] == "1024"
    assert env["FOO"] == "bar"
    volumes = {v["name"]: v for v in p["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "gpuctl-checkpoints"


def test_s3_checkpoints_mount_no_pvc() -> None:
    p = pod(spec(checkpoint={"path": "s3://b/p"}))
    env = {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_CHECKPOINT_DIR] == "s3://b/p"
    assert "checkpoints" not in {v["name"] for v in p["spec"]["volumes"]}


def test_monitor_runs_as_native_sidecar() -> None:
    monitor = pod(spec())["spec"]["initContainers"][0]
    assert monitor["restartPolicy"] == "Always"
    assert monitor["command"] == ["python", "-m", "orchestrator.monitor"]
    args = argparse.ArgumentParser()
    add_monitor_arguments(args)  # the monitor's real command line accepts what the pod passes
    parsed = args.parse_args(monitor["args"])
    assert (parsed.job, parsed.port, parsed.cloud) == ("llm", 9400, "auto")
    assert parsed.notice_file == "/gpuctl/shared/notice"
    assert parsed.summary_stdout is True and parsed.summary_file is None  # the operator reads the log
    assert parsed.keep_running is True  # without NVML it keeps polling notices instead of crash-looping
    assert monitor["securityContext"]["readOnlyRootFilesystem"] is True
    assert parsed.addr == "0.0.0.0"  # Prometheus scrapes the pod IP; the monitor's default is loopback
    # The sidecar follows the file the trainer's runtime writes, on the volume both mount.
    trainer = pod(spec())["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert parsed.progress_file == env[contract.ENV_PROGRESS_FILE] == "/gpuctl/shared/progress.jsonl"
    shared = {m["mountPath"] for m in trainer["volumeMounts"]} & {
        m["mountPath"] for m in monitor["volumeMounts"]
    }
    assert "/gpuctl/shared" in shared


def test_the_trainer_is_locked_down_whatever_the_spec_says() -> None:
    p = pod(spec(user="someone-else", env={"FOO": "bar", "LD_PRELOAD": "x.so"}))
    pod_spec = p["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod_spec and "hostPID" not in pod_spec and "hostIPC" not in pod_spec
    assert all(set(v) & {"emptyDir", "persistentVolumeClaim"} for v in pod_spec["volumes"])  # no hostPath
    trainer = pod_spec["containers"][0]
    assert trainer["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not any(e["name"].startswith("NVIDIA_") for e in trainer["env"])
    # The chart operator, not the job, may change it; a pod never shares the config's dict.
    config = KubeConfig.from_dict({"trainer_security_context": {"runAsNonRoot": True, "runAsUser": 1000}})
    custom = pod(spec(), config)["spec"]["containers"][0]["securityContext"]
    assert custom == {"runAsNonRoot": True, "runAsUser": 1000}
    custom["runAsUser"] = 0
    assert config.trainer_security_context["runAsUser"] == 1000


@pytest.mark.parametrize("job", ["my.job.v1", "1job", "x" * 63, "a" * 59 + "-" + "b" * 190])
def test_any_gpujob_name_makes_valid_pods_and_service(job: str) -> None:
    owner = Owner(job, "u-1")
    svc = build_service(job, "ml", KubeConfig(), owner)
    kubernetes_validate.validate(svc, KUBE_VERSION, strict=True)
    assert len(svc["metadata"]["name"]) <= 63 and svc["metadata"]["name"][0].isalpha()
    for index in (0, 11):
        built = build_pod(
            spec(),
            placement(),
            job=job,
            namespace="ml",
            attempt=1,
            node_index=index,
            config=KubeConfig(),
            owner=owner,
        )
        kubernetes_validate.validate(built, KUBE_VERSION, strict=True)
        meta = built["metadata"]
        assert len(meta["name"]) <= 63 and meta["name"].endswith(f"-n{index}")
        assert all(len(v) <= 63 for v in meta["labels"].values())
        assert meta["annotations"]["gpuctl.dev/job-name"] == job
        assert built["spec"]["subdomain"] == svc["metadata"]["name"]
        assert svc["spec"]["selector"]["gpuctl.dev/job"] == meta["labels"]["gpuctl.dev/job"]


def test_derived_names_are_deterministic_and_distinct() -> None:
    prefix = "a" * 60
    jobs = [prefix + "-x", prefix + "-y", prefix + "-x" * 30, "my.job.v1", "my-job-v1", "1job", "j1job"]
    for suffix in ("", "-rdzv", "-n0"):
        names = [derived_name(j, suffix) for j in jobs]
        assert len(set(names)) == len(jobs) and names == [derived_name(j, suffix) for j in jobs]
    assert derived_name("llm", "-n0") == "llm-n0"  # a valid name stays readable
    assert derived_name("my.job.v1") == "my-job-v1-" + hashlib.sha256(b"my.job.v1").hexdigest()[:8]


def test_torchrun_uses_the_headless_service_for_rendezvous() -> None:
    argv = trainer_argv(spec(), "llm", "ml", KubeConfig())
    assert argv[:2] == ["torchrun", "--nnodes=2:4"]
    assert "--rdzv-endpoint=n0.llm-rdzv.ml.svc:29400" in argv
    assert argv[-2:] == ["--lr", "0.1"]
    with_setup = trainer_argv(spec(setup="pip install -r req.txt"), "llm", "ml", KubeConfig())
    assert with_setup[:2] == ["/bin/sh", "-c"] and with_setup[2].startswith(
        "pip install -r req.txt\nexec torchrun"
    )


def test_custom_gpu_products_and_unknown_types() -> None:
    config = KubeConfig(gpu_products_extra={"B200": ["NVIDIA-B200"]})
    p = build_pod(
        spec(resources={"gpu_types": ["B200"]}),
        placement(gpu="B200"),
        job="llm",
        namespace="ml",
        attempt=1,
        node_index=0,
        config=config,
    )
    assert required_exprs(p)["nvidia.com/gpu.product"]["values"] == ["NVIDIA-B200"]
    with pytest.raises(UserError, match="gpuProducts"):
        pod(spec(resources={"gpu_types": ["B200"]}))
    with pytest.raises(UserError, match="capacityProvider"):
        KubeConfig.from_dict({"capacity_provider": "nope"})
