"""Scrape the real /metrics endpoint fed by replayed samples and parse it back."""

from __future__ import annotations

import argparse
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.monitor.app import add_monitor_arguments
from orchestrator.monitor.metrics import GpuCollector, MetricsServer, kubernetes_labels
from orchestrator.monitor.samples import ReplaySource
from orchestrator.monitor.scrape_server import ScrapeServer
from orchestrator.monitor.summary import WindowAggregator
from tests.monitor.monitor_helpers import H100X8, make_sample

DCGM_GAUGES = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
}
DCGM_LABELS = {"gpu", "UUID", "modelName", "Hostname", "hostname", "device"}
K8S = {"pod": "train-0", "namespace": "ml", "container": "trainer"}


@pytest.fixture
def served() -> Iterator[tuple[GpuCollector, MetricsServer]]:
    collector = GpuCollector(job="job-42", hostname="node-a", extra_labels=K8S)
    server = MetricsServer(collector, port=0, addr="127.0.0.1")
    try:
        yield collector, server
    finally:
        server.close()


def scrape(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_dcgm_names_units_and_labels_after_replay(served: tuple[GpuCollector, MetricsServer]) -> None:
    collector, server = served
    source = ReplaySource(H100X8)
    aggregator = WindowAggregator(window_s=60, interval_s=1)
    ticks = [source.sample() for _ in range(2)]  # GPM ratios need two samples
    for tick in ticks:
        assert tick is not None
        aggregator.add(tick)
        collector.update(tick, aggregator.idle_seconds_total)
    last = ticks[-1]
    assert last is not None
    families = scrape(server.port)

    for name in DCGM_GAUGES:
        family = families[name]
        assert family.type == "gauge", name  # type: ignore[attr-defined]
        samples = family.samples  # type: ignore[attr-defined]
        assert len(samples) == 8, name
        for sample in samples:
            assert set(sample.labels) == DCGM_LABELS | set(K8S), name
            assert sample.labels["modelName"] == "NVIDIA H100 80GB HBM3"
            assert sample.labels["Hostname"] == "node-a"
            assert sample.labels["pod"] == "train-0"
    by_gpu = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_USED"].samples}  # type: ignore[attr-defined]
    free = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_FREE"].samples}  # type: ignore[attr-defined]
    for sample in last:
        assert by_gpu[str(sample.gpu)] == pytest.approx(sample.mem_used_bytes / 2**20)
        assert free[str(sample.gpu)] == pytest.approx(
            (sample.mem_total_bytes - sample.mem_used_bytes) / 2**20
        )
    util = {s.labels["UUID"]: s.value for s in families["DCGM_FI_DEV_GPU_UTIL"].samples}  # type: ignore[attr-defined]
    assert util == {s.uuid: s.util_pct for s in last}
    power = families["DCGM_FI_DEV_POWER_USAGE"].samples[0]  # type: ignore[attr-defined]
    assert power.value == pytest.approx(last[0].power_w)
    active = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples  # type: ignore[attr-defined]
    assert all(0.0 <= s.value <= 1.0 for s in active)


def test_gpuctl_series_in_base_units_with_job_label(served: tuple[GpuCollector, MetricsServer]) -> None:
    collector, server = served
    samples = [make_sample(10.0, gpu=0, util=40.0, mem_gib=12.0, sm_activity=0.3)]
    collector.update(samples, {0: 7.5})
    families = scrape(server.port)
    used = families["gpuctl_gpu_memory_used_bytes"].samples[0]  # type: ignore[attr-defined]
    assert used.value == 12 * 2**30
    assert set(used.labels) == {"gpu", "UUID", "job"} and used.labels["job"] == "job-42"
    assert families["gpuctl_gpu_utilization_ratio"].samples[0].value == pytest.approx(0.4)  # type: ignore[attr-defined]
    assert families["gpuctl_gpu_sm_clock_hertz"].samples[0].value == pytest.approx(1.98e9)  # type: ignore[attr-defined]
    idle = families["gpuctl_gpu_idle_seconds"]
    assert idle.type == "counter"  # type: ignore[attr-defined]
    assert idle.samples[0].name == "gpuctl_gpu_idle_seconds_total"  # type: ignore[attr-defined]
    assert idle.samples[0].value == 7.5  # type: ignore[attr-defined]


def test_profiling_series_absent_without_gpm(served: tuple[GpuCollector, MetricsServer]) -> None:
    collector, server = served
    collector.update([make_sample(1.0)], {})
    families = scrape(server.port)
    assert "DCGM_FI_DEV_GPU_UTIL" in families
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in families
    assert "gpuctl_gpu_sm_activity_ratio" not in families


def test_kubernetes_labels_only_on_kubernetes() -> None:
    assert kubernetes_labels({}) == {}
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "POD_NAME": "p",
        "POD_NAMESPACE": "ns",
        "CONTAINER_NAME": "c",
    }
    assert kubernetes_labels(env) == {"pod": "p", "namespace": "ns", "container": "c"}


def test_metrics_listen_on_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    add_monitor_arguments(parser)
    assert parser.parse_args([]).addr == "127.0.0.1"
    monkeypatch.setenv("GPUCTL_MONITOR_ADDR", "0.0.0.0")
    parser = argparse.ArgumentParser()
    add_monitor_arguments(parser)
    assert parser.parse_args([]).addr == "0.0.0.0"
    server = MetricsServer(GpuCollector(job="j", hostname="h", extra_labels={}), port=0)
    try:
        assert server._server._listener.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()


def test_idle_connections_cannot_starve_a_scrape_or_pile_up_threads() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(job="j", hostname="h", extra_labels={}))
    before = threading.active_count()
    server = ScrapeServer(registry, 0, "127.0.0.1", workers=2, timeout_s=1.0)
    idle = []
    try:
        for _ in range(50):  # 25 times the pool, held open and silent
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
            body = response.read().decode()
        assert time.monotonic() - started < 2.0  # idle connections hold no worker
        assert "gpuctl_gpu_idle_seconds" in body
        assert threading.active_count() <= before + 3  # connection thread and two workers, whatever the load
        # A slow-drip client is cut off at its deadline rather than holding a worker.
        drip = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        drip.sendall(b"GET /metrics HTTP/1.1\r\n")
        drip.settimeout(5)
        assert drip.recv(1024) == b""  # closed unanswered
        drip.close()
        # HEAD and other methods.
        head = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        head.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.recv(1024).startswith(b"HTTP/1.1 405")
        head.close()
    finally:
        for conn in idle:
            conn.close()
        server.close()
    assert threading.active_count() <= before
