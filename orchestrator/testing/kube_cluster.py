"""A simulated Kubernetes cluster for gpuctl's operator: GPU nodes that come and go with a spot trace,
a scheduler, and spot reclaims, on kmock's API emulator (:class:`~orchestrator.testing.kube_api.KubeApi`).

What it models, each step only when a test calls it (nothing moves by itself):

- **nodes** with the labels a GPU cluster's nodes carry: ``topology.kubernetes.io/zone`` (and the
  cloud's zone-id label, for AWS catalog zones), ``topology.kubernetes.io/region``,
  ``karpenter.sh/capacity-type`` ``spot`` or ``on-demand`` (the configured capacity provider's labels),
  ``nvidia.com/gpu.product``, and ``nvidia.com/gpu`` allocatable. On-demand nodes are always there;
  spot nodes follow an :class:`~orchestrator.policies.traces.AvailabilityTrace`: at each tick, zone z
  has ``counts[z, tick]`` spot nodes (the last tick's counts hold after the trace ends);
- **a scheduler** (:meth:`SimulatedKubeCluster.schedule`): a pending pod is bound to a node that
  matches its required node affinity (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) and
  ``nodeSelector``, tolerates its ``NoSchedule`` taints and has the GPUs free, and then runs; else it
  stays ``Pending`` with ``PodScheduled=False``, reason ``Unschedulable`` and a kube-scheduler-like
  message, its ``lastTransitionTime`` the first time it was found so;
- **spot reclaims**: a spot node the trace takes away is tainted and its pods get a
  ``DisruptionTarget`` condition (the kubelet's graceful node shutdown); ``notice_s`` later (at the
  next :meth:`advance` at or after it) its pods and then the node are deleted.

- **Karpenter NodePools** (``node_pools``): served as given (the operator reads their zone and
  capacity-type requirements); they provision nothing, the trace does.

Not modelled: a node provisioner's latency (nodes appear at the tick the trace says), image pulls
(a bound pod runs at once), container restarts, preemption by priority, pod-level taints of
``NoExecute``, topology spread, and any controller (Kueue, Karpenter's NodeClaims, the pod GC's delay).

Time is the cluster's clock: a :class:`~orchestrator.testing.FakeClock` that :meth:`advance` moves, so
a test plays a trace in as many passes as it needs, not in wall-clock time. Give the operator the same
clock (:meth:`operator_clock`); :meth:`operator_passes` waits for its passes (the operator runs in this
process: it counts the passes begun, :data:`orchestrator.backends.kubernetes.listing.passes`). ::

    from operators.kubernetes import handlers

    async with SimulatedKubeCluster(FakeClock(), trace) as cluster:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", cluster.url)
        monkeypatch.setattr(handlers, "clock", cluster.operator_clock)
        await cluster.start_operator()
        await cluster.create_job(body)
        for _ in range(trace.ticks):
            await cluster.advance(trace.tick_h * 3600)
            await cluster.settle()
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from orchestrator.backends.kubernetes import listing
from orchestrator.backends.kubernetes.cluster_zones import NODEPOOL_GROUP, NODEPOOL_PLURAL, NODEPOOL_VERSION
from orchestrator.backends.kubernetes.config import (
    DEFAULT_ZONE_LABELS,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    REGION_LABEL,
    ZONE_LABEL,
    KubeConfig,
)
from orchestrator.backends.kubernetes.manifests import MONITOR, TRAINER
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.testing.kube_api import DEFAULT_TIMEOUT_S, VERBS, KubeApi, kmock
from orchestrator.testing.pod_logs import FakePodLogs
from orchestrator.times import iso_z

RECLAIM_TAINT = "gpuctl.dev/spot-reclaimed"
NODEPOOL_RESOURCE = f"{NODEPOOL_GROUP}/{NODEPOOL_VERSION}/{NODEPOOL_PLURAL}"
LISTING_LAG = 1
"""Passes a change of pods or nodes may wait for before a pass sees it: the operator's passes share one
listing, fetched again when a job's pass would read one its previous pass read."""
DISRUPTION_REASON = "TerminationByKubelet"


class Clock(Protocol):
    def now(self) -> datetime: ...


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True)
class NodeShape:
    """What every node of the simulated cluster is."""

    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    """The ``nvidia.com/gpu.product`` label (GPU Feature Discovery's name of the GPU)."""
    gpus: int = 8
    region: str = "us-central1"
    cloud: str = "gcp"
    """Which cloud's zone labels the nodes carry (AWS: ``topology.k8s.aws/zone-id`` too)."""


class SimulatedKubeCluster(KubeApi):
    """:class:`KubeApi` with nodes, a scheduler and a spot market following ``trace`` (see the module)."""

    def __init__(
        self,
        clock: Clock | None = None,
        trace: AvailabilityTrace | None = None,
        *,
        shape: NodeShape | None = None,
        on_demand_nodes: Mapping[str, int] | None = None,
        notice_s: float = 0.0,
        config: KubeConfig | None = None,
        namespace: str = "default",
        history: bool = True,
        node_pools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """``node_pools``: the Karpenter NodePools (``karpenter.sh/v1``) the cluster has, their CRD
        served; None: no NodePool CRD (listing NodePools is a 404, as on a cluster without Karpenter)."""
        self.clock: Clock = clock or WallClock()
        super().__init__(namespace, FakePodLogs(clock=lambda: self.clock.now().timestamp()), history)
        self.trace = trace
        self.shape = shape or NodeShape()
        self.on_demand_nodes = dict(on_demand_nodes or {})
        """Zone -> on-demand nodes there (always up)."""
        self.notice_s = notice_s
        self.labels = (config or KubeConfig()).capacity_labels()
        self.started_at = self.clock.now()
        self.reclaiming: dict[str, datetime] = {}
        """Spot node -> when it and its pods are deleted."""
        self.history: list[tuple[datetime, str, str]] = []
        """(when, what, name): ``bound``/``unschedulable`` pods, ``added``/``reclaimed``/``deleted`` nodes."""
        self.node_pools = [dict(p) for p in node_pools] if node_pools is not None else None
        if self.node_pools is not None:
            self.emulator.resources[NODEPOOL_RESOURCE] = kmock.ResourceInfo(
                kind="NodePool", namespaced=False, verbs=VERBS
            )

    async def __aenter__(self) -> SimulatedKubeCluster:
        await super().__aenter__()
        self.started_at = self.clock.now()
        for pool in self.node_pools or ():
            group, version, plural = NODEPOOL_RESOURCE.split("/")
            await self.call(self.custom.create_cluster_custom_object, group, version, plural, pool)
        for zone, count in self.on_demand_nodes.items():
            for index in range(count):
                await self.add_node(f"on-demand-{zone}-{index}", zone, spot=False)
        await self.apply_trace()
        return self

    # --- time ------------------------------------------------------------------------------------
    def operator_clock(self) -> datetime:
        """The operator's clock: set ``operators.kubernetes.handlers.clock`` to it."""
        return self.clock.now()

    def job_passes(self, name: str) -> int:
        """How many reconcile passes of GPUJob ``name`` the operator (in this process) began."""
        return listing.passes[f"{self.namespace}/{name}"]

    async def operator_passes(self, count: int = 2, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until the operator began ``count`` more reconcile passes of every GPUJob of the
        namespace. It reconciles a job one pass at a time, so two passes begun means that one whole
        pass saw the present. One more pass is waited for: a pass sees the pods and nodes as listed
        when the job's previous pass began (:class:`~orchestrator.backends.kubernetes.listing.ClusterView`)."""
        names = [str(j["metadata"]["name"]) for j in await self.jobs()]
        targets = {name: self.job_passes(name) + count + LISTING_LAG for name in names}

        async def done() -> bool:
            present = {str(j["metadata"]["name"]) for j in await self.jobs()}
            return all(self.job_passes(n) >= target for n, target in targets.items() if n in present)

        await self.wait_for(f"{count} operator passes of {', '.join(names) or 'no job'}", done, timeout)

    def tick(self) -> int:
        """The trace's tick now."""
        if self.trace is None:
            return 0
        elapsed_h = (self.clock.now() - self.started_at).total_seconds() / 3600.0
        return int(elapsed_h / self.trace.tick_h + 1e-9)

    async def advance(self, seconds: float) -> None:
        """Move the clock (a FakeClock), finish the reclaims due, follow the trace, and schedule."""
        advance = getattr(self.clock, "advance", None)
        if advance is None:
            raise TypeError("advance() needs a clock that moves when told (orchestrator.testing.FakeClock)")
        advance(seconds)
        await self.finish_reclaims()
        await self.apply_trace()
        await self.schedule()

    async def settle(self, rounds: int = 8) -> None:
        """Let the operator and the scheduler answer each other at this time until nothing changes: a
        whole operator pass of every GPUJob, then a scheduling round, again while the pods or the
        GPUJobs' statuses changed (the operator decides the same on the same inputs, so a pass that
        changed nothing means the next one will not either)."""
        for _ in range(rounds):
            before = await self.snapshot()
            await self.operator_passes(2)
            bound = await self.schedule()
            if not bound and await self.snapshot() == before:
                return
        raise AssertionError(f"the operator and the scheduler did not settle in {rounds} rounds")

    async def snapshot(self) -> str:
        """The pods (name, attempt, node, phase) and the GPUJobs' statuses, comparable."""
        jobs = {str(j["metadata"]["name"]): j.get("status") for j in await self.jobs()}
        return json.dumps([_snapshot(await self.pods()), jobs], sort_keys=True, default=str)

    # --- nodes -----------------------------------------------------------------------------------
    async def add_node(
        self, name: str, zone: str, spot: bool, gpus: int | None = None, product: str | None = None
    ) -> None:
        """A node (``gpus`` and ``product``: the shape's unless given)."""
        labels = {
            ZONE_LABEL: zone_name(zone, self.shape.region) if self.shape.cloud == "aws" else zone,
            REGION_LABEL: self.shape.region,
            GPU_PRODUCT_LABEL: product or self.shape.gpu_product,
            "kubernetes.io/hostname": name,
        }
        if self.shape.cloud in DEFAULT_ZONE_LABELS:
            labels[DEFAULT_ZONE_LABELS[self.shape.cloud]] = zone
        taints = []
        if spot:
            labels[self.labels.key] = self.labels.spot_value
            if self.labels.spot_taint:
                taints.append(
                    {"key": self.labels.key, "value": self.labels.spot_value, "effect": "NoSchedule"}
                )
        elif self.labels.on_demand_value is not None:
            labels[self.labels.key] = self.labels.on_demand_value
        gpu_count = str(self.shape.gpus if gpus is None else gpus)
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"allocatable": {GPU_RESOURCE: gpu_count}, "capacity": {GPU_RESOURCE: gpu_count}},
        }
        await self.call(self.core.create_node, body)
        self.history.append((self.clock.now(), "added", name))

    async def apply_trace(self) -> None:
        """Spot nodes as the trace says now: new ones added, those beyond the count reclaimed."""
        if self.trace is None:
            return
        column = min(self.tick(), self.trace.ticks - 1)
        names = {str(n["metadata"]["name"]) for n in await self.nodes()}
        for zone, counts in zip(self.trace.zones, self.trace.counts, strict=True):
            want = int(counts[column])
            present = sorted(
                (n for n in names if n.startswith(f"spot-{zone}-") and n not in self.reclaiming),
                key=lambda n: int(n.rsplit("-", 1)[1]),
            )
            for index in range(len(present), want):
                name = f"spot-{zone}-{index}"
                if name not in names:
                    await self.add_node(name, zone, spot=True)
            for name in present[want:]:
                await self.reclaim(name)

    async def reclaim(self, node: str) -> None:
        """The cloud takes a spot node back: it is tainted, its pods get ``DisruptionTarget``; both
        are deleted ``notice_s`` later (:meth:`finish_reclaims`)."""
        now = self.clock.now()
        taint = {"key": RECLAIM_TAINT, "effect": "NoSchedule"}
        await self.call(self.core.patch_node, node, {"spec": {"taints": [taint], "unschedulable": True}})
        for pod in await self.pods():
            if _spec(pod).get("nodeName") == node:
                condition = {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": DISRUPTION_REASON,
                    "message": f"Pod was terminated in response to imminent node shutdown of {node}.",
                    "lastTransitionTime": iso_z(now),
                }
                conditions = [
                    c for c in _status(pod).get("conditions") or [] if c["type"] != "DisruptionTarget"
                ]
                await self._patch_status(pod, {"conditions": [*conditions, condition]})
        self.reclaiming[node] = now + timedelta(seconds=self.notice_s)
        self.history.append((now, "reclaimed", node))

    async def finish_reclaims(self) -> None:
        """Delete the pods, then the node, of each reclaim whose notice is over."""
        now = self.clock.now()
        due = [node for node, at in self.reclaiming.items() if at <= now]
        if not due:
            return
        for pod in await self.pods():
            if _spec(pod).get("nodeName") in due:
                await self.call(self.core.delete_namespaced_pod, pod["metadata"]["name"], self.namespace)
        for node in due:
            await self.call(self.core.delete_node, node)
            del self.reclaiming[node]
            self.history.append((now, "deleted", node))

    # --- the scheduler ---------------------------------------------------------------------------
    async def schedule(self) -> int:
        """One scheduling round over the pending pods, oldest first; returns how many were bound."""
        nodes = await self.nodes()
        pods = await self.pods()
        used: dict[str, int] = {}
        for pod in pods:
            node = _spec(pod).get("nodeName")
            if node:
                used[node] = used.get(node, 0) + _gpus(pod)
        bound = 0
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or "")):
            if _spec(pod).get("nodeName") or _status(pod).get("phase") not in (None, "Pending"):
                continue
            fits, reasons = _fit(pod, nodes, used)
            if fits is not None:
                await self.bind(pod, fits)
                used[fits] = used.get(fits, 0) + _gpus(pod)
                bound += 1
            else:
                await self._unschedulable(pod, _message(len(nodes), reasons))
        return bound

    async def bind(self, pod: Mapping[str, Any], node: str) -> None:
        """Bind ``pod`` to ``node`` and start it (images are there, containers start at once)."""
        name = str(pod["metadata"]["name"])
        await self.call(self.core.patch_namespaced_pod, name, self.namespace, {"spec": {"nodeName": node}})
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso_z(self.clock.now())}
        await self._patch_status(pod, {"phase": "Running", "conditions": [scheduled]})
        attempt = (pod["metadata"].get("labels") or {}).get("gpuctl.dev/attempt")
        self.history.append((self.clock.now(), "bound", f"{name} (attempt {attempt}) on {node}"))

    async def _unschedulable(self, pod: Mapping[str, Any], message: str) -> None:
        old = next((c for c in _status(pod).get("conditions") or [] if c["type"] == "PodScheduled"), None)
        if old is not None and old.get("reason") == "Unschedulable" and old.get("message") == message:
            return
        since = old["lastTransitionTime"] if old and old.get("reason") == "Unschedulable" else None
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": since or iso_z(self.clock.now()),
        }
        await self._patch_status(pod, {"phase": "Pending", "conditions": [condition]})
        if since is None:
            self.history.append((self.clock.now(), "unschedulable", str(pod["metadata"]["name"])))

    async def _patch_status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        name = str(pod["metadata"]["name"])
        await self.call(self.core.patch_namespaced_pod_status, name, self.namespace, {"status": status})

    # --- the trainer -----------------------------------------------------------------------------
    async def finish_pods(self, job: str, exit_code: int = 0) -> list[str]:
        """The trainer of every running pod of ``job`` exits (0: phase Succeeded, else Failed)."""
        finished = []
        now = iso_z(self.clock.now())
        for pod in await self.pods():
            labels = pod["metadata"].get("labels") or {}
            if labels.get("gpuctl.dev/job") != job or _status(pod).get("phase") != "Running":
                continue
            terminated = {
                "exitCode": exit_code,
                "finishedAt": now,
                "reason": "Completed" if exit_code == 0 else "Error",
            }
            image = next(
                (c.get("image") for c in _spec(pod).get("containers") or [] if c.get("name") == TRAINER), ""
            )
            trainer = {"name": TRAINER, "image": image or "", "imageID": "", "ready": False, "restartCount": 0,
                       "state": {"terminated": terminated}}  # fmt: skip
            phase = "Succeeded" if exit_code == 0 else "Failed"
            await self._patch_status(pod, {"phase": phase, "containerStatuses": [trainer]})
            finished.append(str(pod["metadata"]["name"]))
        return finished

    def write_progress(self, pod: str, step: int, **record: Any) -> None:
        """A training progress record, as the pod's monitor sidecar prints it, at the cluster's time."""
        when = self.clock.now().isoformat(timespec="milliseconds")
        line = PROGRESS_LINE_PREFIX + json.dumps({"time": when, "step": step, **record})
        self.logs.write(self.namespace, pod, MONITOR, line)


def zone_name(zone_id: str, region: str) -> str:
    """The zone name an AWS node carries in ``topology.kubernetes.io/zone`` for the catalog's zone id
    (``use1-az2`` -> ``us-east-1b`` in this simulated account; real accounts map names to ids each
    their own way, which is why the id label is the one matched)."""
    number = zone_id.rsplit("-az", 1)[-1]
    return f"{region}{'abcdefgh'[int(number) - 1]}" if number.isdigit() and 0 < int(number) <= 8 else zone_id


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _snapshot(pods: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (
            str(p["metadata"]["name"]),
            str((p["metadata"].get("labels") or {}).get("gpuctl.dev/attempt")),
            str(_spec(p).get("nodeName")),
            str(_status(p).get("phase")),
        )
        for p in pods
    )


def _gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for container in _spec(pod).get("containers") or []:
        resources = container.get("resources") or {}
        asked = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += int(asked or 0)
    return total


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"the simulated scheduler does not know the operator {operator!r}")


def _affinity_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    spec = _spec(pod)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_matches(e, labels) for e in t.get("matchExpressions") or []) for t in terms)


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def _fit(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], used: Mapping[str, int]
) -> tuple[str | None, dict[str, int]]:
    """The first node (by name) ``pod`` fits on, or None and why each node does not."""
    reasons: dict[str, int] = {}
    tolerations = _spec(pod).get("tolerations") or []
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        name = str(node["metadata"]["name"])
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoSchedule"]
        untolerated = next((t for t in taints if not _tolerated(t, tolerations)), None)
        allocatable = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
        if (node.get("spec") or {}).get("unschedulable"):
            why = "node(s) were unschedulable"
        elif not _affinity_matches(pod, node["metadata"].get("labels") or {}):
            why = "node(s) didn't match Pod's node affinity/selector"
        elif untolerated is not None:
            why = f"node(s) had untolerated taint {{{untolerated['key']}: {untolerated.get('value', '')}}}"
        elif used.get(name, 0) + _gpus(pod) > allocatable:
            why = f"Insufficient {GPU_RESOURCE}"
        else:
            return name, {}
        reasons[why] = reasons.get(why, 0) + 1
    return None, reasons


def _message(total: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's words for a pod no node fits."""
    parts = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    head = f"0/{total} nodes are available" + (f": {parts}." if parts else ".")
    return (
        f"{head} preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    )
