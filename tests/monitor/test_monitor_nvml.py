"""NVML source: the no-driver error path with the real bindings, and the call mapping with a fake."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from orchestrator.errors import EnvironmentProblem
from orchestrator.monitor.nvml_source import NvmlSource
from orchestrator.testing import FakeGpu, FakeNvml


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


def test_sample_mapping_units_and_fallbacks() -> None:
    fake = FakeNvml(gpm=False)  # the kit's default: one A100 whose driver lacks the v2 memory call
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
    source = NvmlSource(FakeNvml([FakeGpu(gpm_sm_occupancy=None)], gpm=True))  # type: ignore[arg-type]
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
    fake.lost.add(0)  # fell off the bus
    with pytest.raises(TemporaryError, match="NVML could not read GPU 0"):
        source.sample()
    logged: list[str] = []
    monitor = Monitor(source, GpuCollector(extra_labels={}), WindowAggregator(), None, logged.append)
    assert monitor.tick() and monitor.tick()
    assert monitor.failed_reads == 2 and len(logged) == 1


def test_several_gpus_readings_that_change_and_no_driver() -> None:
    gpus = [FakeGpu(util_pct=10.0), FakeGpu(name="NVIDIA H100 80GB HBM3", mem_used_gib=70.0)]
    fake = FakeNvml(gpus, memory_v2=True, event_reasons=True)
    source = NvmlSource(fake)  # type: ignore[arg-type]
    first = source.sample()
    assert [(s.gpu, s.uuid, s.util_pct) for s in first] == [(0, "GPU-fake-0", 10.0), (1, "GPU-fake-1", 88.0)]
    assert first[1].model == "NVIDIA H100 80GB HBM3" and first[1].mem_used_bytes == 70 * 2**30
    gpus[0].util_pct = 55.0
    assert source.sample()[0].util_pct == 55.0
    assert set(fake.calls) == {"memory v2"}  # a driver with the v2 call never needs v1
    with pytest.raises(EnvironmentProblem, match="NVML is not available"):
        NvmlSource(FakeNvml(available=False))  # type: ignore[arg-type]
