"""Pure builders: job spec + placement -> pod manifests (one pod per node) and a headless Service.

Nothing here talks to a cluster; the operator sends what these return.

Names: a GPUJob's name may be any DNS-1123 subdomain (253 characters, dots allowed, a digit first),
but a Service name must be a DNS-1035 label (63 characters, a letter first) and a label value at most
63 characters. :func:`derived_name` keeps ``JOB-SUFFIX`` when it is one, and otherwise cuts and cleans
the job name and appends 8 hex digits of the SHA-256 of the whole name, so that two jobs never derive
the same name by sharing a prefix.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any

from orchestrator import contract
from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes.config import GPU_PRODUCT_LABEL, GPU_RESOURCE, REGION_LABEL, KubeConfig
from orchestrator.backends.kubernetes.crd import API_VERSION, KIND
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import InternalError, SpecError
from orchestrator.monitor import push
from orchestrator.spec import JobSpec
from orchestrator.spec.env import FromEnv, SecretRef
from orchestrator.state import job_dir

LABEL_JOB = "gpuctl.dev/job"
LABEL_ATTEMPT = "gpuctl.dev/attempt"
LABEL_NODE_INDEX = "gpuctl.dev/node-index"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANNOTATION_JOB = "gpuctl.dev/job-name"
"""The whole job name (the job label holds a derived one when the name is too long for a label)."""
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
KUEUE_ROLE = "trainer"
"""Every pod of an attempt has one role (one PodSet of the Workload), whatever Kueue would hash from
its labels: the node-index label differs from pod to pod, and a Workload holds at most 8 PodSets."""
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
TRAINER = "trainer"
MONITOR = "monitor"
SHARED_DIR = "/gpuctl/shared"
PROGRESS_FILE = f"{SHARED_DIR}/{job_dir.PROGRESS_FILE}"
NOTICE_FILE = f"{SHARED_DIR}/notice"
INTAKE_TOKEN_KEY = "token"
"""The key of a GPUJob's intake token in its Secret (:func:`intake_secret_name`)."""


@dataclass(frozen=True)
class Owner:
    """The GPUJob that owns the pods (garbage collection removes them with it)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


DNS_LABEL_MAX = 63
"""Longest Service name, pod name we derive, and label value."""
NAME_HASH_CHARS = 8
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def name_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:NAME_HASH_CHARS]


def derived_name(job: str, suffix: str = "") -> str:
    """A DNS-1035 label for ``job`` + ``suffix`` (``suffix``: '' or '-' and letters/digits).

    ``JOB SUFFIX`` itself when it is one; else the job name lowercased, every run of other characters
    made '-', a letter put first when it starts with none, cut to fit, then '-', 8 hex digits of the
    SHA-256 of the whole job name, and the suffix: deterministic, and distinct for distinct names."""
    plain = f"{job}{suffix}"
    if len(plain) <= DNS_LABEL_MAX and _DNS_1035_LABEL.fullmatch(plain):
        return plain
    cleaned = re.sub(r"[^a-z0-9]+", "-", job.lower()).strip("-")
    if not cleaned[:1].isalpha():
        cleaned = f"j{cleaned}"
    room = DNS_LABEL_MAX - len(suffix) - 1 - NAME_HASH_CHARS
    return f"{cleaned[:room].rstrip('-')}-{name_hash(job)}{suffix}"


def service_name(job: str) -> str:
    return derived_name(job, "-rdzv")


def pod_name(job: str, node_index: int) -> str:
    return derived_name(job, f"-n{node_index}")


def pod_group_name(job: str, attempt: int, owner_uid: str | None = None) -> str:
    """The Kueue pod group (and Workload) name of one attempt: ``JOB-aATTEMPT``, with 6 hex digits of
    the GPUJob's uid when known, so that a GPUJob deleted and created again under the same name never
    meets the Workload of its predecessor's attempt. A DNS-1035 label (a label value and a CRD name)."""
    suffix = f"-a{attempt}" + (f"-{name_hash(owner_uid)[:6]}" if owner_uid else "")
    return derived_name(job, suffix)


def kueue_metadata(
    queue: str, job: str, attempt: int, attempt_nodes: int, owner_uid: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that make Kueue admit an attempt's pods as one group in ``queue``.

    Kueue's pod webhook adds the ``kueue.x-k8s.io/admission`` scheduling gate itself (and removes it
    on admission); gpuctl does not, so pods in a namespace Kueue does not manage are never stranded.
    A failed pod of an attempt is never replaced in its group (the next attempt is a new group), so
    the group is not retriable: Kueue ends the Workload, releasing the quota, once its pods are done."""
    labels = {KUEUE_QUEUE_LABEL: queue, KUEUE_GROUP_LABEL: pod_group_name(job, attempt, owner_uid)}
    annotations = {
        KUEUE_GROUP_COUNT_ANNOTATION: str(attempt_nodes),
        KUEUE_RETRIABLE_ANNOTATION: "false",
        KUEUE_ROLE_HASH_ANNOTATION: KUEUE_ROLE,
    }
    return labels, annotations


def node_hostname(node_index: int) -> str:
    return f"n{node_index}"


def job_label(job: str) -> str:
    """The value of the job label: the job name when it is a valid label value, else a derived name."""
    if len(job) <= DNS_LABEL_MAX and _LABEL_VALUE.fullmatch(job):
        return job
    return derived_name(job)


def job_labels(job: str) -> dict[str, str]:
    return {LABEL_JOB: job_label(job), LABEL_MANAGED: "gpuctl"}


def _metadata(
    name: str, namespace: str, job: str, labels: dict[str, str], owner: Owner | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {ANNOTATION_JOB: job},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner.reference()]
    return meta


def build_service(job: str, namespace: str, config: KubeConfig, owner: Owner | None = None) -> dict[str, Any]:
    """Headless Service giving each pod a stable DNS name ``nI.<service>`` for the c10d rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service_name(job), namespace, job, job_labels(job), owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: job_label(job)},
            "ports": [{"name": "rendezvous", "port": config.rendezvous_port, "protocol": "TCP"}],
        },
    }


def rendezvous_endpoint(job: str, namespace: str, config: KubeConfig) -> str:
    return f"{node_hostname(0)}.{service_name(job)}.{namespace}.svc:{config.rendezvous_port}"


def trainer_argv(spec: JobSpec, job: str, namespace: str, config: KubeConfig) -> list[str]:
    res = spec.resources
    torchrun = [
        "torchrun",
        f"--nnodes={res.min_nodes}:{res.max_nodes}" if res.elastic else f"--nnodes={res.min_nodes}",
        f"--nproc-per-node={res.gpus_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rendezvous_endpoint(job, namespace, config)}",
        f"--rdzv-id={job}",
        "--max-restarts=0",
        *spec.command_argv,
    ]
    if spec.setup is None:
        return torchrun
    return ["/bin/sh", "-c", f"{spec.setup}\nexec {shlex.join(torchrun)}"]


def checkpoint_dir(spec: JobSpec, job: str, config: KubeConfig) -> str:
    path = spec.checkpoint.path
    if path is not None and path.startswith("s3://"):
        return path
    return f"{config.checkpoint_mount}/{job}"


def kube_env_problems(spec: JobSpec) -> list[str]:
    """``{from_env: VAR}`` cannot work on Kubernetes: the pods are started by the operator, in the
    cluster, far from the shell that submitted; the value would have to be stored to get there."""
    return [
        f"env.{name}: {{from_env: {ref.from_env}}} is not available on Kubernetes (the pods start in the "
        "cluster, away from the shell that submits). To fix: put the value in a Secret of the job's "
        f'namespace (`kubectl create secret generic NAME --from-literal=KEY="${ref.from_env}"`) and '
        "write {secret: NAME, key: KEY}"
        for name, ref in spec.env.items()
        if isinstance(ref, FromEnv)
    ]


def check_kube_env(spec: JobSpec, source: str) -> None:
    """Raise :class:`SpecError` when the spec's ``env`` cannot be given to pods (see :func:`kube_env_problems`)."""
    problems = kube_env_problems(spec)
    if problems:
        raise SpecError(source, problems)


def _user_env_var(name: str, value: str | SecretRef | FromEnv) -> dict[str, Any]:
    if isinstance(value, SecretRef):  # the kubelet reads the Secret; gpuctl never does
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": value.secret, "key": value.key}}}
    if isinstance(value, FromEnv):
        raise InternalError(f"env.{name}: from_env reached the pod builder (check_kube_env refuses it)")
    return {"name": name, "value": value}


def _env(spec: JobSpec, job: str, attempt: int, name: str, config: KubeConfig) -> list[dict[str, Any]]:
    ckpt = spec.checkpoint
    values = contract.training_env(
        job_id=job,
        attempt=attempt,
        node_id=name,
        checkpoint_dir=checkpoint_dir(spec, job, config),
        keep=ckpt.keep,
        every_steps=ckpt.every_steps,
        every_seconds=int(ckpt.every.total_seconds()) if ckpt.every is not None else None,
        global_batch=spec.policies.global_batch,
        progress_file=PROGRESS_FILE,
        notice_file=NOTICE_FILE,
        tune=spec.runtime.tune.value,
    )
    check_kube_env(spec, f"job '{spec.name}'")
    user_env = [_user_env_var(k, v) for k, v in spec.env.items() if k not in values]
    return user_env + [{"name": k, "value": v} for k, v in values.items()]


def _affinity(spec: JobSpec, placement: Placement, config: KubeConfig) -> dict[str, Any]:
    """Required: one of the spec's GPU products, the placement's market and where it may run (a spot
    placement's zone; on-demand: the spec's zones or regions); preferred: its GPU type."""
    products = [p for t in spec.resources.gpu_types for p in config.products_for(t)]
    required = [
        {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(dict.fromkeys(products))},
        config.market_expression(placement.market),
        *_where(spec, placement, config),
    ]
    preferred = {
        "key": GPU_PRODUCT_LABEL,
        "operator": "In",
        "values": config.products_for(placement.gpu_type),
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": required}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [preferred]}}
            ],
        }
    }


def _where(spec: JobSpec, placement: Placement, config: KubeConfig) -> list[dict[str, Any]]:
    """The node affinity for the placement's place: the market policy picks a spot zone; on-demand
    capacity is taken in any allowed zone."""
    if placement.market is MarketKind.SPOT:
        return [config.zone_expression(placement.cloud, placement.region, [placement.zone])]
    if spec.market.zones:
        return [config.zone_expression(placement.cloud, placement.region, list(spec.market.zones))]
    if spec.market.regions:
        return [{"key": REGION_LABEL, "operator": "In", "values": list(spec.market.regions)}]
    return []


def _tolerations(placement: Placement, config: KubeConfig) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    labels = config.capacity_labels()
    if placement.market is MarketKind.SPOT and labels.spot_taint:
        tolerations.append(
            {"key": labels.key, "operator": "Equal", "value": labels.spot_value, "effect": "NoSchedule"}
        )
    return tolerations


def _trainer_resources(spec: JobSpec) -> dict[str, Any]:
    res = spec.resources
    limits: dict[str, str] = {GPU_RESOURCE: str(res.gpus_per_node)}
    requests: dict[str, str] = {}
    if res.cpus_per_node is not None:
        requests["cpu"] = limits["cpu"] = f"{res.cpus_per_node:g}"
    if res.memory_gib_per_node is not None:
        requests["memory"] = limits["memory"] = f"{round(res.memory_gib_per_node * 1024)}Mi"
    return {"limits": limits, "requests": requests} if requests else {"limits": limits}


def intake_secret_name(job: str) -> str:
    return derived_name(job, "-intake")


def build_intake_secret(owner: Owner, namespace: str, token: str) -> dict[str, Any]:
    """The Secret holding a GPUJob's intake token (orchestrator/backends/kubernetes/intake.py), owned by the GPUJob."""
    name = intake_secret_name(owner.name)
    meta = _metadata(name, namespace, owner.name, job_labels(owner.name), owner)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "stringData": {INTAKE_TOKEN_KEY: token}}  # fmt: skip


def _intake_env(job: str, config: KubeConfig, owner: Owner | None) -> list[dict[str, Any]]:
    """The monitor's push target (orchestrator/monitor/push.py): the operator's intake, the GPUJob's
    token (from its Secret, optional: without it the monitor does not push and its log is read) and
    uid, the pod's name and uid. None without an intake URL in the config or an owning GPUJob."""
    if not config.intake_url or owner is None:
        return []
    token = {"name": intake_secret_name(job), "key": INTAKE_TOKEN_KEY, "optional": True}
    return [
        {"name": push.ENV_INTAKE_URL, "value": config.intake_url},
        {"name": push.ENV_INTAKE_TOKEN, "valueFrom": {"secretKeyRef": token}},
        {"name": push.ENV_JOB_UID, "value": owner.uid},
        {"name": push.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": push.ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]


def _monitor_container(job: str, name: str, config: KubeConfig, owner: Owner | None = None) -> dict[str, Any]:
    """Native sidecar (init container that keeps running): the pod still completes with the trainer.

    Its stdout carries only window summary lines and progress lines (its own messages go to stderr)."""
    return {
        "name": MONITOR,
        "image": config.monitor_image,
        "restartPolicy": "Always",
        "command": ["python", "-m", "orchestrator.monitor"],
        "args": [
            f"--job={job}",
            f"--port={config.monitor_port}",
            "--addr=0.0.0.0",  # Prometheus scrapes the pod's IP (the monitor defaults to loopback)
            "--cloud=auto",
            f"--notice-file={NOTICE_FILE}",
            # Window summaries go to the container log, where the operator reads them.
            "--summary-stdout",
            # and the trainer's progress records, which the operator reads there too.
            f"--progress-file={PROGRESS_FILE}",
            # Without NVML (a node without the NVIDIA runtime) keep polling for notices rather
            # than exit and be restarted over and over.
            "--keep-running",
        ],
        # No GPU request of its own: the NVIDIA runtime exposes the node's GPUs to read through NVML.
        "env": [
            {"name": contract.ENV_NODE_ID, "value": name},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            *_intake_env(job, config, owner),
        ],
        "ports": [{"name": "metrics", "containerPort": config.monitor_port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "gpuctl-shared", "mountPath": SHARED_DIR}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def build_pod(
    spec: JobSpec,
    placement: Placement,
    *,
    job: str,
    namespace: str,
    attempt: int,
    node_index: int,
    config: KubeConfig,
    owner: Owner | None = None,
    name: str | None = None,
    attempt_nodes: int | None = None,
) -> dict[str, Any]:
    """The pod of one node of an attempt; ``name`` defaults to :func:`pod_name` (``JOB-nINDEX``).

    ``attempt_nodes``: how many nodes the whole attempt has (the Kueue group's size); needed when the
    job has a Kueue queue (:meth:`KubeConfig.queue_for`)."""
    name = name or pod_name(job, node_index)
    labels = {**job_labels(job), LABEL_ATTEMPT: str(attempt), LABEL_NODE_INDEX: str(node_index)}
    annotations: dict[str, str] = {}
    queue = config.queue_for(spec.queue)
    if queue is not None:
        if attempt_nodes is None or attempt_nodes < 1:
            raise InternalError(
                f"job '{job}' has Kueue queue '{queue}' but no attempt size for its pod group"
            )
        kueue_labels, annotations = kueue_metadata(
            queue, job, attempt, attempt_nodes, owner.uid if owner else None
        )
        labels.update(kueue_labels)
    if config.karpenter_do_not_disrupt:
        # Consolidation and drift wait for the pod; a spot interruption still takes the node (handled).
        annotations[KARPENTER_DO_NOT_DISRUPT] = "true"
    mounts = [{"name": "gpuctl-shared", "mountPath": SHARED_DIR}]
    volumes: list[dict[str, Any]] = [{"name": "gpuctl-shared", "emptyDir": {}}]
    uses_pvc = not checkpoint_dir(spec, job, config).startswith("s3://")
    if uses_pvc and config.checkpoint_pvc is not None:
        mounts.append({"name": "checkpoints", "mountPath": config.checkpoint_mount})
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": config.checkpoint_pvc}})
    trainer = {
        "name": TRAINER,
        "image": spec.image or config.default_image,
        "command": trainer_argv(spec, job, namespace, config),
        "workingDir": spec.workdir if spec.workdir.startswith("/") else None,
        "env": _env(spec, job, attempt, name, config),
        "ports": [{"name": "rendezvous", "containerPort": config.rendezvous_port, "protocol": "TCP"}],
        "resources": _trainer_resources(spec),
        "volumeMounts": mounts,
        # The chart operator's setting (restricted by default); nothing in the job spec changes it.
        "securityContext": copy.deepcopy(config.trainer_security_context) or None,
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Training code gets no credentials for the API server.
        "automountServiceAccountToken": False,
        "hostname": node_hostname(node_index),
        "subdomain": service_name(job),
        "terminationGracePeriodSeconds": math.ceil(spec.checkpoint.notice_grace_seconds),
        "affinity": _affinity(spec, placement, config),
        "tolerations": _tolerations(placement, config),
        "initContainers": [_monitor_container(job, name, config, owner)],
        "containers": [{k: v for k, v in trainer.items() if v is not None}],
        "volumes": volumes,
    }
    if config.service_account:
        pod_spec["serviceAccountName"] = config.service_account
    annotations.update(
        {
            "gpuctl.dev/gpu-type": placement.gpu_type,
            "gpuctl.dev/market": str(placement.market),
            "gpuctl.dev/node-price-usd-per-hour": f"{placement.node_price_usd_per_hour:g}",
        }
    )
    meta = _metadata(name, namespace, job, labels, owner)
    meta["annotations"].update(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
