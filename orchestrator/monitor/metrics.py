"""Prometheus exposition: dcgm-exporter-compatible series plus gpuctl's own in base units.

DCGM names, units and labels follow dcgm-exporter's default counters so its dashboards work
unchanged: ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname`` (and ``hostname``, used by
newer dcgm-exporter releases), and ``pod``/``namespace``/``container`` on Kubernetes. gpuctl's
series carry ``gpu``, ``UUID`` and ``job``.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.monitor.samples import GpuSample
from orchestrator.monitor.scrape_server import ScrapeServer

MIB = 1024 * 1024


@dataclass(frozen=True)
class _Series:
    name: str
    help: str
    value: str  # attribute of GpuSample, or a derived key below


DCGM_SERIES = (
    _Series("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_pct"),
    _Series("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    _Series("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    _Series("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w"),
    _Series("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    _Series("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c"),
    _Series(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock event (throttle) reasons bitmask.", "reasons"
    ),
    _Series(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gr_engine_active"
    ),
    _Series(
        "DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "sm_activity"
    ),
    _Series(
        "DCGM_FI_PROF_SM_OCCUPANCY", "The fraction of resident warps on a multiprocessor.", "sm_occupancy"
    ),
)

GPUCTL_SERIES = (
    _Series("gpuctl_gpu_utilization_ratio", "GPU utilization, 0-1.", "util_ratio"),
    _Series("gpuctl_gpu_memory_used_bytes", "GPU memory used.", "mem_used_bytes"),
    _Series("gpuctl_gpu_memory_total_bytes", "GPU memory total.", "mem_total_bytes"),
    _Series("gpuctl_gpu_power_watts", "GPU power draw.", "power_w"),
    _Series("gpuctl_gpu_sm_clock_hertz", "SM clock frequency.", "sm_clock_hz"),
    _Series("gpuctl_gpu_temperature_celsius", "GPU temperature.", "temp_c"),
    _Series("gpuctl_gpu_sm_activity_ratio", "Fraction of SMs busy (GPM), 0-1.", "sm_activity"),
    _Series("gpuctl_gpu_processes", "Compute processes on the GPU.", "processes"),
)


def _value(sample: GpuSample, key: str) -> float | None:
    if key == "fb_used_mib":
        return sample.mem_used_bytes / MIB
    if key == "fb_free_mib":
        return sample.mem_free_bytes / MIB
    if key == "reasons":
        return float(sample.clock_event_reasons)
    if key == "util_ratio":
        return sample.util_pct / 100.0
    if key == "sm_clock_hz":
        return sample.sm_clock_mhz * 1e6
    if key == "processes":
        return float(len(sample.processes))
    value = getattr(sample, key)
    return None if value is None else float(value)


def kubernetes_labels(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """pod/namespace/container from the downward API variables, when running on Kubernetes."""
    env = os.environ if env is None else env
    if not (env.get("KUBERNETES_SERVICE_HOST") or env.get("POD_NAME")):
        return {}
    return {
        "pod": env.get("POD_NAME", env.get("HOSTNAME", "")),
        "namespace": env.get("POD_NAMESPACE", ""),
        "container": env.get("CONTAINER_NAME", ""),
    }


class GpuCollector(Collector):
    """Holds the latest tick and the idle counters; renders them on every scrape."""

    def __init__(
        self, job: str = "", hostname: str | None = None, extra_labels: Mapping[str, str] | None = None
    ):
        self.job = job
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.extra_labels = dict(kubernetes_labels() if extra_labels is None else extra_labels)
        self._lock = threading.Lock()
        self._samples: list[GpuSample] = []
        self._idle: dict[int, float] = {}

    def update(self, samples: Sequence[GpuSample], idle_seconds_total: Mapping[int, float]) -> None:
        with self._lock:
            self._samples = list(samples)
            self._idle = dict(idle_seconds_total)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            samples, idle = self._samples, self._idle
        dcgm_names = ["gpu", "UUID", "device", "modelName", "Hostname", "hostname", *self.extra_labels]
        own_names = ["gpu", "UUID", "job"]
        for series in DCGM_SERIES:
            family = GaugeMetricFamily(series.name, series.help, labels=dcgm_names)
            for s in samples:
                value = _value(s, series.value)
                if value is not None:
                    labels = [str(s.gpu), s.uuid, f"nvidia{s.gpu}", s.model, self.hostname, self.hostname]
                    family.add_metric([*labels, *self.extra_labels.values()], value)
            if family.samples:
                yield family
        for series in GPUCTL_SERIES:
            family = GaugeMetricFamily(series.name, series.help, labels=own_names)
            for s in samples:
                value = _value(s, series.value)
                if value is not None:
                    family.add_metric([str(s.gpu), s.uuid, self.job], value)
            if family.samples:
                yield family
        idle_family = CounterMetricFamily(
            "gpuctl_gpu_idle_seconds",
            "Seconds the GPU was idle (utilization below threshold).",
            labels=own_names,
        )
        for s in samples:
            idle_family.add_metric([str(s.gpu), s.uuid, self.job], idle.get(s.gpu, 0.0))
        yield idle_family


class MetricsServer:
    """The /metrics HTTP endpoint on its own registry (port 0 picks a free port), on loopback unless
    told otherwise; a bounded :class:`ScrapeServer`."""

    def __init__(self, collector: GpuCollector, port: int = 9400, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server = ScrapeServer(self.registry, port, addr)
        self.port = self._server.port

    def close(self) -> None:
        self._server.close()
