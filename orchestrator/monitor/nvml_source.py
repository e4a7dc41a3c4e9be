"""Live samples from NVML (nvidia-ml-py, imported lazily). Every optional call is guarded.

Optional features are probed per device and remembered: the v2 memory call (``used`` excludes
the driver's reserved memory), clock-event reasons (older drivers: "throttle reasons"), per-process
memory, and GPM metrics (Hopper and newer) for SM activity.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from orchestrator.errors import EnvironmentProblem, TemporaryError
from orchestrator.monitor.samples import GpuSample, ProcessMemory

NO_NVML_FIX = (
    "run on a machine with an NVIDIA GPU and driver (`nvidia-smi` must work; in a container use "
    "`--gpus all` or the NVIDIA device plugin), or replay recorded samples with `--source replay FILE`"
)


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:
        raise EnvironmentProblem(
            "the NVML Python bindings (nvidia-ml-py) are not installed",
            "pip install 'gpuctl[monitor]' (nvidia-ml-py), or replay recorded samples with "
            "`--source replay FILE`",
        ) from exc
    module: ModuleType = pynvml
    return module


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    model: str
    memory_v2: bool = True
    event_reasons: bool = True
    processes: bool = True
    gpm: bool = False
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_have_previous: bool = False


class NvmlSource:
    """Samples every GPU NVML sees. Raises EnvironmentProblem when NVML cannot start."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self.nvml = nvml if nvml is not None else _import_pynvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise EnvironmentProblem(
                f"NVML is not available: {exc} (no NVIDIA driver or GPU here)", NO_NVML_FIX
            ) from exc
        except OSError as exc:
            raise EnvironmentProblem(f"NVML could not be loaded: {exc}", NO_NVML_FIX) from exc
        self.devices = [self._open(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        if not self.devices:
            self.close()
            raise EnvironmentProblem("NVML started but reports no GPU", NO_NVML_FIX)

    def _open(self, index: int) -> _Device:
        nv = self.nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        device = _Device(
            index, handle, _text(nv.nvmlDeviceGetUUID(handle)), _text(nv.nvmlDeviceGetName(handle))
        )
        try:
            device.gpm = bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            if device.gpm:
                device.gpm_samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
        except (nv.NVMLError, AttributeError):
            device.gpm = False
        return device

    def sample(self) -> list[GpuSample]:
        """One sample per GPU; TemporaryError when a required reading fails (e.g. a GPU fell off)."""
        now = time.time()
        samples = []
        for device in self.devices:
            try:
                samples.append(self._sample_device(device, now))
            except self.nvml.NVMLError as exc:
                raise TemporaryError(
                    f"NVML could not read GPU {device.index} ({device.uuid}): {exc}",
                    "check `nvidia-smi` and the kernel log (Xid errors); the monitor retries next tick",
                ) from exc
        return samples

    def _sample_device(self, device: _Device, now: float) -> GpuSample:
        nv = self.nvml
        handle = device.handle
        used, total = self._memory(device)
        gr_active, sm_active, sm_occupancy = self._gpm(device)
        return GpuSample(
            time=now,
            gpu=device.index,
            uuid=device.uuid,
            model=device.model,
            util_pct=float(nv.nvmlDeviceGetUtilizationRates(handle).gpu),
            mem_used_bytes=used,
            mem_total_bytes=total,
            power_w=nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            sm_clock_mhz=float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            temp_c=float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            clock_event_reasons=self._event_reasons(device),
            processes=self._processes(device),
            gr_engine_active=gr_active,
            sm_activity=sm_active,
            sm_occupancy=sm_occupancy,
        )

    def _memory(self, device: _Device) -> tuple[int, int]:
        nv = self.nvml
        if device.memory_v2:
            try:
                info = nv.nvmlDeviceGetMemoryInfo(device.handle, version=nv.nvmlMemory_v2)
                return int(info.used), int(info.total)
            except (nv.NVMLError, AttributeError, TypeError):
                device.memory_v2 = False  # old driver or bindings: v1 from now on
        info = nv.nvmlDeviceGetMemoryInfo(device.handle)
        return int(info.used), int(info.total)

    def _event_reasons(self, device: _Device) -> int:
        if not device.event_reasons:
            return 0
        nv = self.nvml
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            call = getattr(nv, name, None)
            if call is None:
                continue
            try:
                return int(call(device.handle))
            except nv.NVMLError:
                continue
        device.event_reasons = False
        return 0

    def _processes(self, device: _Device) -> tuple[ProcessMemory, ...]:
        if not device.processes:
            return ()
        nv = self.nvml
        try:
            running = nv.nvmlDeviceGetComputeRunningProcesses(device.handle)
        except nv.NVMLError:
            device.processes = False
            return ()
        return tuple(ProcessMemory(int(p.pid), p.usedGpuMemory) for p in running)

    def _gpm(self, device: _Device) -> tuple[float | None, float | None, float | None]:
        """GR engine active, SM activity, SM occupancy (ratios) between the last two GPM samples."""
        if not device.gpm:
            return None, None, None
        nv = self.nvml
        previous, current = device.gpm_samples
        try:
            nv.nvmlGpmSampleGet(device.handle, current)
            if not device.gpm_have_previous:
                device.gpm_have_previous = True
                return None, None, None
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 3
            request.sample1 = previous
            request.sample2 = current
            wanted = (
                nv.NVML_GPM_METRIC_GRAPHICS_UTIL,
                nv.NVML_GPM_METRIC_SM_UTIL,
                nv.NVML_GPM_METRIC_SM_OCCUPANCY,
            )
            for slot, metric_id in enumerate(wanted):
                request.metrics[slot].metricId = metric_id
            nv.nvmlGpmMetricsGet(request)
        except (nv.NVMLError, AttributeError):
            device.gpm = False
            return None, None, None
        finally:
            device.gpm_samples = [current, previous]
        values: list[float | None] = []
        for slot in range(3):
            metric = request.metrics[slot]
            values.append(None if metric.nvmlReturn != 0 else min(max(metric.value / 100.0, 0.0), 1.0))
        return values[0], values[1], values[2]

    def close(self) -> None:
        nv = self.nvml
        for device in getattr(self, "devices", []):
            for gpm_sample in device.gpm_samples:
                with contextlib.suppress(nv.NVMLError):
                    nv.nvmlGpmSampleFree(gpm_sample)
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
