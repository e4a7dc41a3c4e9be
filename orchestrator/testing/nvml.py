"""A fake NVML: the part of ``pynvml`` (nvidia-ml-py) that gpuctl's monitor calls, for tests without a GPU.

Pass it where the monitor takes the NVML module::

    from orchestrator.monitor.nvml_source import NvmlSource
    from orchestrator.testing import FakeGpu, FakeNvml

    nvml = FakeNvml([FakeGpu(util_pct=88), FakeGpu(name="NVIDIA H100 80GB HBM3", mem_used_gib=70)])
    source = NvmlSource(nvml)
    samples = source.sample()          # one GpuSample per fake GPU
    nvml.gpus[0].util_pct = 10          # the next sample reads the new value
    nvml.lost.add(1)                    # GPU 1 "fell off the bus": its reads raise NVMLError

A driver's gaps are choices: ``memory_v2=False`` (an old driver without the v2 memory call),
``event_reasons=False`` (only the older "throttle reasons" call), ``gpm=True`` (Hopper's GPM metrics,
SM activity), ``available=False`` (no driver: ``nvmlInit`` fails as on a machine without a GPU).
``calls`` records the memory calls made (``"memory v2"``, ``"memory v1"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

GIB = 2**30


class FakeNVMLError(Exception):
    """What the fake raises where pynvml raises ``NVMLError``."""


@dataclass
class FakeGpu:
    """One GPU's readings (change them between samples)."""

    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str | None = None
    """Default: ``GPU-fake-<index>``."""
    util_pct: float = 88.0
    mem_used_gib: float = 20.0
    mem_total_gib: float = 80.0
    power_w: float = 312.5
    sm_clock_mhz: int = 1410
    temp_c: int = 61
    clock_event_reasons: int = 0x4
    processes: list[tuple[int, int | None]] = field(default_factory=lambda: [(123, 19 * GIB), (124, None)])
    """(pid, used bytes or None when the driver does not say) of each compute process."""
    gpm_graphics_util: float = 90.0
    gpm_sm_util: float = 75.0
    gpm_sm_occupancy: float | None = None
    """None: this GPU does not support the occupancy metric (its call fails on its own)."""


class FakeNvml:
    """Just enough of pynvml for :class:`~orchestrator.monitor.nvml_source.NvmlSource` (see the module)."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        gpm: bool = False,
        memory_v2: bool = False,
        event_reasons: bool = False,
        available: bool = True,
    ) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.gpm = gpm
        self.memory_v2 = memory_v2
        self.available = available
        if event_reasons:  # newer drivers name it "clock event reasons"; older ones only "throttle"
            self.nvmlDeviceGetCurrentClocksEventReasons = self.nvmlDeviceGetCurrentClocksThrottleReasons
        self.lost: set[int] = set()
        """Indexes of GPUs whose readings fail (a GPU that fell off the bus)."""
        self.calls: list[str] = []
        self.initialized = False
        self.shutdown = False

    def _gpu(self, handle: str) -> FakeGpu:
        index = int(handle.removeprefix("handle-"))
        if index in self.lost:
            raise FakeNVMLError("GPU is lost")
        return self.gpus[index]

    # --- library ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if not self.available:
            raise FakeNVMLError("NVML Shared Library Not Found")
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle-{index}"

    # --- device ----------------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        gpu = self._gpu(handle)
        return (gpu.uuid or f"GPU-fake-{handle.removeprefix('handle-')}").encode()

    def nvmlDeviceGetName(self, handle: str) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> Any:
        self.calls.append(f"memory v{2 if version else 1}")
        if version and not self.memory_v2:
            raise FakeNVMLError("Function Not Found")
        gpu = self._gpu(handle)
        used, total = int(gpu.mem_used_gib * GIB), int(gpu.mem_total_gib * GIB)
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=self._gpu(handle).util_pct, memory=40)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return int(self._gpu(handle).power_w * 1000)  # mW

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        if clock != self.NVML_CLOCK_SM:
            raise FakeNVMLError("Invalid Argument")
        return self._gpu(handle).sm_clock_mhz

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return self._gpu(handle).temp_c

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return self._gpu(handle).clock_event_reasons

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._gpu(handle).processes]

    # --- GPM (Hopper and newer) ------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        if not self.gpm:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(taken=0, handle=None)

    def nvmlGpmSampleGet(self, handle: str, sample: Any) -> Any:
        sample.taken += 1
        sample.handle = handle
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None: ...

    def c_nvmlGpmMetricsGet_t(self) -> Any:
        metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(3)]
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=metrics)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        gpu = self._gpu(request.sample2.handle)
        values = {
            self.NVML_GPM_METRIC_GRAPHICS_UTIL: gpu.gpm_graphics_util,
            self.NVML_GPM_METRIC_SM_UTIL: gpu.gpm_sm_util,
            self.NVML_GPM_METRIC_SM_OCCUPANCY: gpu.gpm_sm_occupancy,
        }
        for metric in request.metrics:
            value = values[metric.metricId]
            if value is None:
                metric.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED, for this metric only
            else:
                metric.value = value
        return request
