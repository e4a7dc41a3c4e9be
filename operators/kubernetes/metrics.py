"""Prometheus metrics of the operator: one series per job, from the status it just wrote."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge

from orchestrator.monitor.scrape_server import ScrapeServer
from orchestrator.state.status import JobStatus

_LABELS = ("namespace", "job")
JOB_COST = Gauge("gpuctl_job_cost_usd", "Cost of the job so far at catalog prices", _LABELS)
JOB_NODES = Gauge("gpuctl_job_nodes", "Pods of the job running now", _LABELS)
JOB_PREEMPTIONS = Gauge("gpuctl_job_preemptions", "Nodes of the job lost to preemption so far", _LABELS)
JOB_RESTARTS = Gauge("gpuctl_job_restarts", "Crash restarts of the job so far", _LABELS)
JOB_STATE = Gauge("gpuctl_job_state", "1 for the job's current state", (*_LABELS, "state"))
RECONCILES = Counter("gpuctl_operator_reconciles", "Reconcile passes run by the operator")


def serve(port: int) -> ScrapeServer:
    """Serve the metrics on all addresses (Prometheus scrapes the operator pod), bounded threads."""
    return ScrapeServer(REGISTRY, port, "0.0.0.0")


def record(namespace: str, job: str, status: Mapping[str, Any]) -> None:
    RECONCILES.inc()
    JOB_COST.labels(namespace, job).set(float(status.get("costUsd") or 0.0))
    JOB_NODES.labels(namespace, job).set(int(status.get("nodes") or 0))
    JOB_PREEMPTIONS.labels(namespace, job).set(int(status.get("preemptions") or 0))
    JOB_RESTARTS.labels(namespace, job).set(int(status.get("restarts") or 0))
    current = status.get("state")
    for state in JobStatus:
        JOB_STATE.labels(namespace, job, str(state)).set(1 if state == current else 0)


def forget(namespace: str, job: str) -> None:
    """Drop a deleted job's series."""
    for gauge in (JOB_COST, JOB_NODES, JOB_PREEMPTIONS, JOB_RESTARTS):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, job)
    for state in JobStatus:
        with contextlib.suppress(KeyError):
            JOB_STATE.remove(namespace, job, str(state))
