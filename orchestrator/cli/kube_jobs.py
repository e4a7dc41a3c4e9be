"""`gpuctl submit/list/status/logs/cancel --backend kubernetes`: GPUJob resources through the API.

On Kubernetes the operator is the controller and the GPUJob's ``status`` is the job's state, so these
commands only talk to the API server (kubeconfig, ``$KUBECONFIG``, or in-cluster credentials).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.cli.views import gpu_use_line
from orchestrator.spec import JobSpec
from orchestrator.state.gpu_usage import GpuUsage

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


def default_namespace() -> str:
    return os.environ.get("GPUCTL_NAMESPACE", "default")


def gpujob_document(obj: dict[str, Any]) -> dict[str, Any]:
    """The GPUJob in the same shape as ``gpuctl status -o json`` for local jobs, where fields overlap."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    now = datetime.now(UTC)
    segments = []
    for seg in status.get("segments", []):
        start = datetime.fromisoformat(seg["start"])
        end = datetime.fromisoformat(seg["end"]) if seg.get("end") else None
        hours = ((end or now) - start).total_seconds() / 3600.0
        segments.append({
            "gpu_type": seg.get("gpuType"), "market": seg.get("market"), "nodes": seg.get("nodes"),
            "started_at": seg["start"], "ended_at": seg.get("end"),
            "cost_usd": round(hours * seg.get("nodes", 0) * seg.get("nodePriceUsdPerHour", 0.0), 6),
        })  # fmt: skip
    return {
        "id": meta.get("name"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "user": status.get("user") or meta.get("namespace"),
        "backend": "kubernetes",
        "state": status.get("state", "PENDING"),
        "attempts": int(status.get("attempt", 0)),
        "preemptions": int(status.get("preemptions", 0)),
        "restarts": int(status.get("restarts", 0)),
        "nodes": status.get("nodes"),
        "cost_usd": round(float(status.get("costUsd", 0.0)), 6),
        "segments": segments,
        "conditions": status.get("conditions", []),
        "gpu_usage": _gpu_usage(status.get("gpuUsage")),
        "gpu_monitor_message": status.get("gpuMonitorMessage"),
    }


def _gpu_usage(written: Any) -> dict[str, Any] | None:
    """The operator's ``status.gpuUsage`` with every field of a local job's ``gpu_usage`` (null ones are
    left out of the status); None until a monitor window was read."""
    if not written:
        return None
    return {f.name: written.get(f.name) for f in dataclasses.fields(GpuUsage)}


def submit(spec: JobSpec, namespace: str, detach: bool, poll_s: float = 2.0) -> int:
    client.create_gpujob(spec, namespace)
    name = spec.name  # the GPUJob is named after the job
    print(f"gpujob/{name} created in namespace {namespace}", flush=True)
    if detach:
        return 0
    last = None
    while True:
        doc = gpujob_document(client.get_gpujob(name, namespace))
        if doc["state"] != last:
            print(f"{datetime.now(UTC).isoformat(timespec='seconds')}  {doc['state']}", flush=True)
            last = doc["state"]
        if doc["state"] in TERMINAL_STATES:
            print(
                f"cost {doc['cost_usd']:.4f} USD, attempts {doc['attempts']}, preemptions {doc['preemptions']}"
            )
            return 0 if doc["state"] == "SUCCEEDED" else 1
        time.sleep(poll_s)


def status(name: str, namespace: str, output: str) -> int:
    doc = gpujob_document(client.get_gpujob(name, namespace))
    if output == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(f"gpujob {doc['name']} ({doc['namespace']}): {doc['state']}, {doc['nodes'] or 0} node(s), "
              f"attempts {doc['attempts']}, preemptions {doc['preemptions']}, cost {doc['cost_usd']:.4f} USD")  # fmt: skip
        if doc["gpu_usage"]:
            print(gpu_use_line(doc["gpu_usage"]))
        elif doc["gpu_monitor_message"]:
            print(doc["gpu_monitor_message"])
        for cond in doc["conditions"]:
            print(
                f"  {cond.get('type')}={cond.get('status')} {cond.get('reason', '')}: {cond.get('message', '')}"
            )
    return 0


def list_jobs(namespace: str, output: str) -> int:
    docs = [gpujob_document(obj) for obj in client.list_gpujobs(namespace)]
    if output == "json":
        print(json.dumps(docs, indent=2))
    else:
        for d in docs:
            print(f"{d['name']:<32} {d['state']:<11} nodes {d['nodes'] or 0:<3} cost {d['cost_usd']:.4f} USD")
    return 0


def logs(name: str, namespace: str) -> int:
    print(client.pod_logs(name, namespace))
    return 0


def cancel(name: str, namespace: str) -> int:
    client.delete_gpujob(name, namespace)
    print(f"gpujob/{name} deleted; the operator's finalizer removes its pods")
    return 0
