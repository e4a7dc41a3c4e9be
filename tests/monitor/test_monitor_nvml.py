"""NVML source: the no-driver error path with the real bindings, and the call mapping with a fake."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import EnvironmentProblem
from orchestrator.monitor.nvml_source import NvmlSource


def nvml_works() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVIDIA driver")
def test_no_driver_is_a_clear_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        NvmlSource()
    message = caught.value.message
    assert message.startswith("NVML is not available:")
    assert "To fix:" in message and "--source replay FILE" in message
    assert caught.value.exit_code == 3


@pytest.mark.slow
@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVIDIA driver")
def test_cli_exits_non_zero_with_the_message() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.monitor", "--once"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith("gpuctl monitor: error: NVML is not available")
    assert "Traceback" not in result.stderr


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """Just enough of pynvml: one GPU whose driver lacks the v2 memory call and clock-event reasons."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3

    def __init__(self, gpm: bool) -> None:
        self.gpm = gpm
        self.calls: list[str] = []
        self.shutdown = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle-{index}"

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return b"GPU-fake-0"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        if not self.gpm:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(taken=0)

    def nvmlGpmSampleGet(self, handle: str, sample: Any) -> Any:
        sample.taken += 1
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None: ...

    def c_nvmlGpmMetricsGet_t(self) -> Any:
        metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(3)]
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=metrics)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        values = {1: 90.0, 2: 75.0, 3: 30.0}
        for metric in request.metrics:
            metric.value = values[metric.metricId]
        request.metrics[2].nvmlReturn = 3  # occupancy not supported on this GPU
        return request

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> Any:
        self.calls.append(f"memory v{2 if version else 1}")
        if version:
            raise FakeNVMLError("Function Not Found")
        return SimpleNamespace(used=20 * 2**30, total=80 * 2**30, free=60 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=88, memory=40)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 312_500  # mW

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return 1410

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return 0x4

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [
            SimpleNamespace(pid=123, usedGpuMemory=19 * 2**30),
            SimpleNamespace(pid=124, usedGpuMemory=None),
        ]


def test_sample_mapping_units_and_fallbacks() -> None:
    fake = FakeNvml(gpm=False)
    source = NvmlSource(fake)  # type: ignore[arg-type]
    [first] = source.sample()
    [second] = source.sample()
    assert first.uuid == "GPU-fake-0" and first.model == "NVIDIA A100-SXM4-80GB"
    assert (first.util_pct, first.power_w, first.sm_clock_mhz, first.temp_c) == (88.0, 312.5, 1410.0, 61.0)
    assert (first.mem_used_bytes, first.mem_total_bytes) == (20 * 2**30, 80 * 2**30)
    assert first.clock_event_reasons == 0x4  # older name used when the new one is missing
    assert [(p.pid, p.used_bytes) for p in first.processes] == [(123, 19 * 2**30), (124, None)]
    assert first.sm_activity is None and second.sm_activity is None
    assert fake.calls == ["memory v2", "memory v1", "memory v1"]  # v2 tried once, then remembered
    source.close()
    assert fake.shutdown


def test_gpm_ratios_from_two_samples() -> None:
    source = NvmlSource(FakeNvml(gpm=True))  # type: ignore[arg-type]
    [first] = source.sample()
    [second] = source.sample()
    assert first.gr_engine_active is None  # GPM needs a previous sample
    assert second.gr_engine_active == pytest.approx(0.90)
    assert second.sm_activity == pytest.approx(0.75)
    assert second.sm_occupancy is None  # that metric failed on its own: guarded
    source.close()


def test_real_gpm_structure_accepts_three_metrics() -> None:
    import pynvml

    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.numMetrics = 3
    request.metrics[2].metricId = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
    assert ctypes.sizeof(request) > 0 and request.metrics[2].metricId == 3


def test_lost_gpu_is_a_temporary_error_and_the_monitor_keeps_going() -> None:
    from orchestrator.errors import TemporaryError
    from orchestrator.monitor.app import Monitor
    from orchestrator.monitor.metrics import GpuCollector
    from orchestrator.monitor.summary import WindowAggregator

    fake = FakeNvml(gpm=False)
    source = NvmlSource(fake)  # type: ignore[arg-type]

    def fell_off_the_bus(handle: str) -> Any:
        raise FakeNVMLError("GPU is lost")

    fake.nvmlDeviceGetUtilizationRates = fell_off_the_bus  # type: ignore[method-assign]
    with pytest.raises(TemporaryError, match="NVML could not read GPU 0"):
        source.sample()
    logged: list[str] = []
    monitor = Monitor(source, GpuCollector(extra_labels={}), WindowAggregator(), None, logged.append)
    assert monitor.tick() and monitor.tick()
    assert monitor.failed_reads == 2 and len(logged) == 1
