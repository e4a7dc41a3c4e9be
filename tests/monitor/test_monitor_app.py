"""The monitor loop and the `gpuctl monitor` / `gpuctl diagnose` commands, driven by replay."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from orchestrator.cli.main import build_parser, main
from orchestrator.errors import EnvironmentProblem, NotFoundError, UserError
from orchestrator.monitor.app import parse_duration_s, run_monitor
from orchestrator.monitor.samples import GpuSample, ReplaySource, read_sample_ticks
from tests.monitor.monitor_helpers import H100X8, FakeMetadata, make_sample


def test_recorded_file_has_eight_gpus_per_tick() -> None:
    ticks = list(read_sample_ticks(H100X8))
    assert len(ticks) == 120
    assert all([s.gpu for s in tick] == list(range(8)) for tick in ticks)
    assert all(s.model == "NVIDIA H100 80GB HBM3" for s in ticks[0])


def test_sample_round_trip_and_bad_lines(tmp_path: Path) -> None:
    sample = make_sample(1.0, sm_activity=0.5)
    assert GpuSample.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(sample.to_dict()) + "\n" + '{"time": 2}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: not a valid GPU sample"):
        list(read_sample_ticks(bad))
    with pytest.raises(NotFoundError):
        list(read_sample_ticks(tmp_path / "missing.jsonl"))


def test_replay_loop_keeps_time_increasing(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(json.dumps(make_sample(t).to_dict()) for t in (10.0, 11.0)) + "\n")
    source = ReplaySource(path, loop=True)
    times = []
    for _ in range(5):
        tick = source.sample()
        assert tick is not None
        times.append(tick[0].time)
    assert times == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert ReplaySource(path).sample() is not None


def test_durations() -> None:
    assert [parse_duration_s(t) for t in ("60s", "2m", "1.5", "250ms", "1h")] == [60, 120, 1.5, 0.25, 3600]


def test_monitor_replay_writes_window_summaries(tmp_path: Path) -> None:
    summary = tmp_path / "summary.jsonl"
    args = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--interval", "0", "--window", "60s",
         "--summary-file", str(summary), "--port", "-1", "--job", "job-7"]
    )  # fmt: skip
    logged: list[str] = []
    assert run_monitor(args, log=logged.append) == 0
    windows = [json.loads(line) for line in summary.read_text().splitlines()]
    assert [(w["start"] - 1763790000.0, w["duration_s"], w["gpus"]) for w in windows] == [
        (0.0, 60.0, 8),
        (60.0, 60.0, 8),
    ]
    assert windows[1]["idle_seconds"] == 48.0  # the synthetic checkpoint pause: 6 ticks x 8 GPUs
    assert windows[0]["idle_seconds"] == 0.0
    assert windows[0]["job_id"] == "job-7"
    assert 0.0 < windows[0]["throttled_fraction"] < 0.1  # GPU 5 power-capped for 20 s
    assert logged[-1] == "stopped after 120 tick(s)"


def test_summary_stdout_prints_the_same_lines_as_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.jsonl"
    args = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--interval", "0", "--window", "30s",
         "--summary-file", str(summary), "--summary-stdout", "--port", "-1"]
    )  # fmt: skip
    assert run_monitor(args, log=lambda _line: None) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and printed == summary.read_text().splitlines()
    assert all(json.loads(line)["kind"] == "gpuctl.monitor.window" for line in printed)

    only_stdout = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--interval", "0", "--window", "60s",
         "--summary-stdout", "--port", "-1"]
    )  # fmt: skip
    assert run_monitor(only_stdout, log=lambda _line: None) == 0
    assert [json.loads(line)["duration_s"] for line in capsys.readouterr().out.splitlines()] == [60.0, 60.0]


def test_without_nvml_the_unavailable_line_goes_to_stdout_too(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["monitor", "--summary-stdout", "--port", "-1", "--job", "j"])
    try:
        run_monitor(args, log=lambda _line: None)
    except EnvironmentProblem:
        pass
    else:
        pytest.skip("this machine has NVML")
    (line,) = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert record["kind"] == "gpuctl.monitor.unavailable" and record["reason"] == "no_nvml"


@pytest.mark.slow  # a real metadata server / HTTP scrape
def test_monitor_serves_metrics_while_running(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--loop", "--interval", "0.05", "--port", "0",
         "--addr", "127.0.0.1", "--max-ticks", "40"]
    )  # fmt: skip
    logged: list[str] = []
    scraped: list[str] = []

    def scrape_when_up() -> None:
        import time
        import urllib.request

        for _ in range(100):
            served = [line for line in logged if line.startswith("serving /metrics")]
            if served:
                port = served[0].rsplit(":", 1)[1]
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    scraped.append(response.read().decode())
                return
            time.sleep(0.02)

    scraper = threading.Thread(target=scrape_when_up)
    scraper.start()
    assert run_monitor(args, log=logged.append) == 0
    scraper.join(timeout=10)
    assert scraped and "DCGM_FI_DEV_GPU_UTIL{" in scraped[0]


def test_once_json_prints_one_sample_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--once", "-o", "json", "--source", "replay", str(H100X8)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [s["gpu"] for s in printed] == list(range(8))
    assert printed[0]["mem_total_bytes"] == 85520809984
    assert main(["monitor", "--once", "--source", "replay", str(H100X8)]) == 0
    assert "NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_bad_source_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--once", "--source", "replay"]) == 2
    assert "--source replay needs exactly one FILE" in capsys.readouterr().err


def test_diagnose_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.jsonl"
    window = {
        "kind": "gpuctl.monitor.window", "start": 0.0, "duration_s": 60.0, "gpus": 1, "util_mean_pct": 30.0,
        "util_p95_pct": 60.0, "util_max_pct": 70.0, "mem_used_max_bytes": 10 * 2**30, "mem_total_bytes": 80 * 2**30,
        "idle_seconds": 0.0, "sm_activity_mean": None, "throttled_fraction": 0.0,
    }  # fmt: skip
    summary.write_text(json.dumps(window) + "\n")
    assert main(["diagnose", "--summaries", str(summary), "-o", "json", "--gpu-type", "H100"]) == 0
    findings = {f["code"]: f for f in json.loads(capsys.readouterr().out)}
    assert set(findings) == {"low-utilization", "oversized-gpu", "larger-batch"}  # 70 GiB never used
    assert findings["oversized-gpu"]["evidence"]["candidates"]  # cheaper catalog GPUs that fit 12 GiB
    assert main(["diagnose", "--summaries", str(summary)]) == 0
    assert "[warning] low-utilization" in capsys.readouterr().out
    assert main(["diagnose", "--summaries", str(summary), "--gpu-type", "NoSuchGPU"]) == 2


@pytest.mark.slow
def test_sidecar_process_stops_on_sigterm_and_writes_the_last_window(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    summary = tmp_path / "summary.jsonl"
    replay = ["--source", "replay", str(H100X8), "--loop", "--interval", "0.02"]
    command = [sys.executable, "-m", "orchestrator.monitor", *replay, "--port", "-1"]
    command += ["--summary-file", str(summary), "--window", "1h"]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        assert child.poll() is None and not summary.exists()  # the hour-long window is still open
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        assert child.stderr is not None
        err = child.stderr.read()
        child.stderr.close()
    [window] = [json.loads(line) for line in summary.read_text().splitlines()]
    assert window["gpus"] == 8 and window["duration_s"] > 0
    assert "stopped after" in err


@pytest.mark.slow  # a real metadata server / HTTP scrape
def test_without_nvml_keep_running_still_watches_for_notices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sidecar on a node without NVML: no GPU windows, but the preemption notice still arrives."""
    metadata = FakeMetadata()
    threading.Thread(target=metadata.serve_forever, daemon=True).start()
    notice_file = tmp_path / "notice"
    args = build_parser().parse_args(
        ["monitor", "--keep-running", "--summary-stdout", "--port", "-1", "--job", "j", "--interval", "0.1",
         "--cloud", "aws", "--metadata-url", metadata.url, "--notice-interval", "0.1",
         "--notice-file", str(notice_file), "--max-ticks", "30"]
    )  # fmt: skip
    metadata.notice = True
    lines: list[str] = []
    try:
        assert run_monitor(args, log=lines.append) == 0
    finally:
        metadata.shutdown()
    if not any("still watching" in line for line in lines):
        pytest.skip("this machine has NVML")
    (summary,) = capsys.readouterr().out.splitlines()
    assert json.loads(summary)["reason"] == "no_nvml"
    assert json.loads(notice_file.read_text())["cloud"] == "aws"
