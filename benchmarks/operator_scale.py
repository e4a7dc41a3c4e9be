"""Benchmark: the Kubernetes operator's cost to the API server at cluster scale: monitor records read from
pod logs (the operator without an intake) versus pushed to its intake (orchestrator/backends/kubernetes/intake.py),
and each pass reading its GPUJob, pods and nodes versus taking them from what the passes share
(kopf's watched copy of the GPUJob, one pod and one node listing per round: listing.ClusterView).

    python benchmarks/operator_scale.py [--jobs 500] [--nodes 4] [--passes 1]

On the testing kit's simulated cluster (kmock's API emulator over real HTTP, the real ``kubernetes``
client): ``--jobs`` GPUJobs of ``--nodes`` one-GPU pods each, on on-demand nodes of 8 GPUs, all running.
Every pass round moves the cluster's clock by the reconcile interval (10 s); each pod's monitor then has
one new progress record and, every 6th round, a window summary: printed to its log (both modes) and,
with the intake, posted by the sidecar's own push client. Each round runs one reconcile pass of every
GPUJob (:func:`operators.kubernetes.reconcile.reconcile_isolated`, what kopf's timer calls), counts the
API requests it made and the operator's CPU time (the passes' thread and the intake's request
threads; not the emulator, not the sidecars). The first round with the intake is the catch-up of a
started operator (one log read per monitor) and is shown apart. With a shared view, each round's
GPUJobs come from one LIST (standing for kopf's watch, which sends them on one long request), and the
view's first round (one GET per GPUJob, as after a start) is not counted. Prints one table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operators.kubernetes.reconcile import reconcile_isolated
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes import intake as intake_module
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.crd import GROUP, VERSION
from orchestrator.backends.kubernetes.gpu_usage import monitor_key
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.manifests import MONITOR
from orchestrator.contract import PROGRESS_LINE_PREFIX, WINDOW_KIND
from orchestrator.monitor.push import Pusher, PushTarget
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_api import JOB_RESOURCE
from orchestrator.testing.kube_cluster import SimulatedKubeCluster

ZONE = "us-central1-a"
INTERVAL_S = 10.0
WINDOW_EVERY = 6
"""A window summary every 6 rounds: the monitor's default 60 s window at the default 10 s interval."""
KEY = b"benchmark-intake-key-0123456789"
T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


@dataclass
class Round:
    requests: Counter[str]
    cpu_s: float
    """The passes' and the intake's."""
    intake_cpu_s: float
    wall_s: float


def gpujob(name: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": T0.isoformat()},
        "spec": {
            "command": "train.py",
            "image": "example.com/train:1",
            "resources": {"gpu_types": ["H100"], "gpus_per_node": 1, "nodes": nodes},
            "market": {"mode": "on-demand"},
        },
    }


class Sidecars:
    """Each running pod's monitor: new records each round, to its log and (with an intake) pushed."""

    def __init__(self, cluster: SimulatedKubeCluster, pods: list[dict[str, Any]]) -> None:
        self.cluster, self.pods, self.step = cluster, pods, 0
        self.pushers: dict[str, Pusher] = {}

    def connect(self, url: str) -> None:
        for pod in self.pods:
            job_uid = f"uid-{pod['metadata']['labels']['gpuctl.dev/job']}"
            name, pod_uid = monitor_key(pod).split("/", 1)
            token = intake_module.job_token(KEY, job_uid)
            target = PushTarget(f"{url}/v1/monitor-records", token, job_uid, name, pod_uid)
            self.pushers[name] = Pusher(target)

    def emit(self) -> None:
        self.step += 1
        now = self.cluster.clock.now()
        lines = [PROGRESS_LINE_PREFIX + json.dumps({"time": now.isoformat(), "step": self.step})]
        if self.step % WINDOW_EVERY == 0:
            lines.append(json.dumps(window(now.timestamp())))
        for pod in self.pods:
            name = str(pod["metadata"]["name"])
            for line in lines:
                self.cluster.logs.write(self.cluster.namespace, name, MONITOR, line)
                if self.pushers:
                    self.pushers[name].add(line)
            if self.pushers:
                self.pushers[name].send()


def window(end: float) -> dict[str, Any]:
    duration = INTERVAL_S * WINDOW_EVERY
    return {"kind": WINDOW_KIND, "start": end - duration, "end": end, "duration_s": duration, "gpus": 1,
            "model": "NVIDIA H100 80GB HBM3", "util_mean_pct": 90.0, "util_p95_pct": 99.0,
            "util_max_pct": 100.0, "mem_used_max_bytes": 70 << 30, "mem_total_bytes": 80 << 30,
            "idle_seconds": 0.0}  # fmt: skip


def pass_all(
    names: list[str],
    cluster: SimulatedKubeCluster,
    config: KubeConfig,
    api: Any,
    view: ClusterView | None = None,
) -> float:
    """One reconcile pass of every job, in this thread; returns its CPU seconds. With a ``view``, the
    GPUJobs as one LIST has them (kopf's watch), handed to the passes."""
    started = time.thread_time()
    now = cluster.clock.now()
    bodies: dict[str, Any] = {}
    if view is not None:
        bodies = {str(j["metadata"]["name"]): j for j in client.list_gpujobs(cluster.namespace, api)}
    for name in names:
        reconcile_isolated(name, cluster.namespace, config, now, api, view, bodies.get(name))
    return time.thread_time() - started


async def one_round(
    cluster: SimulatedKubeCluster,
    sidecars: Sidecars,
    names: list[str],
    config: KubeConfig,
    api: Any,
    view: ClusterView | None = None,
) -> Round:
    cluster.clock.advance(INTERVAL_S)  # type: ignore[attr-defined]
    intake = intake_module.active()
    before, intake_cpu = cluster.requests(), intake.cpu_s if intake else 0.0
    await asyncio.to_thread(sidecars.emit)  # their posts: the intake's CPU counts
    wall = time.perf_counter()
    cpu = await asyncio.to_thread(pass_all, names, cluster, config, api, view)
    wall = time.perf_counter() - wall
    intake_cpu = (intake.cpu_s - intake_cpu) if intake else 0.0
    done = Round(cluster.requests() - before, cpu + intake_cpu, intake_cpu, wall)
    print(f"round: {sum(done.requests.values())} requests, {cpu:.1f} s CPU, {wall:.1f} s", file=sys.stderr)
    return done


async def setup(
    cluster: SimulatedKubeCluster, jobs: int, nodes: int, config: KubeConfig, api: Any
) -> list[str]:
    """``jobs`` running GPUJobs: the first placed and started by real passes and the kit's scheduler,
    the others stored as its copies (their names, uids and nodes changed), without requests."""
    names = [f"job-{i:04d}" for i in range(jobs)]
    first = names[0]
    await cluster.create_job(gpujob(first, nodes))
    await asyncio.to_thread(pass_all, [first], cluster, config, api)  # placed, pods created
    await cluster.schedule()  # bound and running
    await asyncio.to_thread(pass_all, [first], cluster, config, api)  # RUNNING
    template = json.dumps(
        {"job": await cluster.job(first), "pods": await cluster.pods(),
         "services": [cluster.as_dict(s) for s in (await cluster.call(cluster.core.list_namespaced_service,
                                                                    cluster.namespace)).items]}
    )  # fmt: skip
    node_names = sorted(str(n["metadata"]["name"]) for n in await cluster.nodes())
    objects, ns = cluster.emulator.objects, cluster.namespace
    for index, name in enumerate(names[1:], 1):
        copy = json.loads(template.replace(first, name))
        objects[JOB_RESOURCE, ns, name] = copy["job"]
        for k, pod in enumerate(copy["pods"]):
            pod["spec"]["nodeName"] = node_names[(index * nodes + k) * len(node_names) // (jobs * nodes)]
            objects["v1/pods", ns, pod["metadata"]["name"]] = pod
        for service in copy["services"]:
            objects["v1/services", ns, service["metadata"]["name"]] = service
    return names


def summary(rounds: list[Round], jobs: int) -> tuple[float, float, float, Counter[str]]:
    requests: Counter[str] = Counter()
    for r in rounds:
        requests.update(r.requests)
    n = len(rounds)
    total = sum(requests.values()) / n
    return total / INTERVAL_S, sum(r.cpu_s for r in rounds) / n / jobs, total / jobs, requests


async def run(jobs: int, nodes: int, passes: int, log: Callable[[str], None]) -> None:
    clock = FakeClock(T0)
    node_count = math.ceil(jobs * nodes / 8)
    async with SimulatedKubeCluster(clock, on_demand_nodes={ZONE: node_count}, history=False) as cluster:
        config, api = KubeConfig(), client.api_client_for(cluster.url)
        intake_module.activate(None)
        t = time.perf_counter()
        names = await setup(cluster, jobs, nodes, config, api)
        pods = await cluster.pods()
        running = sum((p.get("status") or {}).get("phase") == "Running" for p in pods)
        states = Counter(str((j.get("status") or {}).get("state")) for j in await cluster.jobs())
        log(f"setup: {jobs} GPUJobs, {running} running pods, {node_count} nodes, states {dict(states)} "
            f"in {time.perf_counter() - t:.0f} s")  # fmt: skip
        sidecars = Sidecars(cluster, pods)
        logs_rounds = [await one_round(cluster, sidecars, names, config, api) for _ in range(passes)]
        server = intake_module.IntakeServer(intake_module.Intake(KEY), 0, "127.0.0.1")
        intake_module.activate(server.intake)
        sidecars.connect(f"http://127.0.0.1:{server.port}")
        try:
            catch_up = await one_round(cluster, sidecars, names, config, api)
            push_rounds = [await one_round(cluster, sidecars, names, config, api) for _ in range(passes)]
            view = ClusterView()
            await one_round(cluster, sidecars, names, config, api, view)  # the view's first: not counted
            shared = [await one_round(cluster, sidecars, names, config, api, view) for _ in range(passes)]
        finally:
            intake_module.activate(None)
            server.close()
        states = Counter(str((j.get("status") or {}).get("state")) for j in await cluster.jobs())
        steps = Counter(
            int(((j.get("status") or {}).get("progress") or {}).get("step", -1)) for j in await cluster.jobs()
        )
        log(f"after: states {dict(states)}, newest step {dict(steps)} (the sidecars' {sidecars.step})")
        print_table(jobs, nodes, passes, logs_rounds, catch_up, push_rounds, shared)


def print_table(
    jobs: int,
    nodes: int,
    passes: int,
    logs: list[Round],
    catch_up: Round,
    push: list[Round],
    shared: list[Round],
) -> None:
    rows = [
        ("log reads, reads per pass", logs),
        ("push, first pass (catch-up)", [catch_up]),
        ("push, reads per pass", push),
        ("push, shared view", shared),
    ]
    print(f"{jobs} GPUJobs x {nodes} pods, steady running, one pass per job every {INTERVAL_S:g} s; "
          f"{passes} pass round(s) per mode")  # fmt: skip
    head = ("mode", "API req/s", "req/pass", "pod log reads/s", "CPU ms/pass", "of which intake")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|")
    results = {}
    for label, rounds in rows:
        per_s, cpu, per_pass, requests = summary(rounds, jobs)
        log_reads = requests["GET pods/log"] / len(rounds) / INTERVAL_S
        intake_ms = sum(r.intake_cpu_s for r in rounds) / len(rounds) / jobs * 1000
        results[label] = (per_s, cpu)
        cells = (
            f"{per_s:.0f}",
            f"{per_pass:.2f}",
            f"{log_reads:.0f}",
            f"{cpu * 1000:.1f}",
            f"{intake_ms:.1f}",
        )
        print(f"| {label} | " + " | ".join(cells) + " |")
    a_req, a_cpu = results["push, shared view"]
    for label in ("log reads, reads per pass", "push, reads per pass"):
        b_req, b_cpu = results[label]
        print(f"{label} / shared view: API requests {b_req / a_req:.2f}x, operator CPU {b_cpu / a_cpu:.2f}x")
    for label, rounds in (("reads per pass", push), ("shared view", shared)):
        _, _, _, requests = summary(rounds, jobs)
        print(f"requests per pass, push, {label}, by kind: "
              + ", ".join(f"{k} {v / len(rounds) / jobs:.3f}" for k, v in sorted(requests.items())))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=4, help="pods per GPUJob")
    parser.add_argument("--passes", type=int, default=1, help="pass rounds measured per mode")
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.nodes, args.passes, lambda line: print(line, file=sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
