"""The operator's GPU use ledger: windows from monitor logs, each counted once across re-reads and restarts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.backends.kubernetes.crd import gpujob_crd
from orchestrator.backends.kubernetes.gpu_usage import (
    CLOCK_SKEW_MARGIN_S,
    MonitorLedger,
    monitor_key,
    since_seconds,
)
from orchestrator.monitor.samples import read_sample_ticks
from orchestrator.monitor.summary import WindowAggregator, unavailable_record
from orchestrator.state.gpu_usage import NO_NVML_MESSAGE, aggregate, usage_window

REPLAY = Path(__file__).resolve().parents[2] / "data" / "monitor" / "h100x8_synthetic.jsonl"
STDERR = "gpuctl monitor: serving /metrics on 0.0.0.0:9400\n"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """The replay summarised in 10 s windows: the JSON lines the sidecar prints."""
    aggregator = WindowAggregator(window_s=10.0, interval_s=1.0)
    out = []
    for tick in read_sample_ticks(REPLAY):
        finished = aggregator.add(tick)
        if finished:
            out.append(json.dumps(finished, separators=(",", ":")) + "\n")
    assert len(out) >= 10
    return out


def restarted(ledger: MonitorLedger) -> MonitorLedger:
    """What a new operator process reads back: the status as JSON, through the API server."""
    return MonitorLedger.from_status(json.loads(json.dumps(ledger.status_fields())))


def expected(lines_by_monitor: dict[str, list[str]]) -> Any:
    return aggregate([usage_window(m, json.loads(x)) for m, xs in lines_by_monitor.items() for x in xs])


def test_overlapping_reads_and_restarts_count_each_window_once(lines: list[str]) -> None:
    ledger = MonitorLedger()
    assert ledger.take("p-n0/u1", STDERR + "".join(lines[:4])) == 4
    # the next read reaches back past the last window (sinceSeconds margin): only new windows count
    assert ledger.take("p-n0/u1", "".join(lines[2:6])) == 2
    ledger = restarted(ledger)
    assert ledger.take("p-n0/u1", STDERR + "".join(lines[:6])) == 0
    assert ledger.take("p-n0/u1", "".join(lines[5:])) == len(lines) - 6
    ledger = restarted(restarted(ledger))
    assert ledger.take("p-n0/u1", "".join(lines)) == 0
    usage = ledger.totals.usage()
    assert usage is not None and usage == expected({"p-n0/u1": lines})
    assert usage.samples == 8 * 10 * len(lines) and usage.monitors == 1
    assert ledger.status_fields()["gpuUsage"] == {k: v for k, v in usage.to_dict().items() if v is not None}


def test_monitors_are_pods_and_gone_pods_keep_their_windows(lines: list[str]) -> None:
    ledger = MonitorLedger()
    ledger.take("p-n0/u1", "".join(lines[:3]))
    ledger.take("p-n1/u2", "".join(lines[:3]))
    # attempt 2 reuses the pod name: a new uid is a new monitor, its windows count from its start
    ledger.take("p-n0/u3", "".join(lines[3:5]))
    ledger.keep_only({"p-n0/u3"})
    assert set(ledger.last_ends) == {"p-n0/u3"}
    ledger = restarted(ledger)
    usage = ledger.totals.usage()
    want = expected({"p-n0/u1": lines[:3], "p-n1/u2": lines[:3], "p-n0/u3": lines[3:5]})
    assert usage == want and usage is not None and usage.monitors == 3 and usage.windows == 8


def test_unavailable_line_gives_a_message_and_no_usage() -> None:
    ledger = MonitorLedger()
    line = json.dumps(unavailable_record("p", "no_nvml", "NVML Shared Library Not Found")) + "\n"
    assert ledger.take("p-n0/u1", STDERR + line + line + "not json {\n") == 0
    assert ledger.message == NO_NVML_MESSAGE
    assert ledger.status_fields() == {"gpuMonitorMessage": NO_NVML_MESSAGE}
    assert restarted(ledger).message == NO_NVML_MESSAGE


def test_malformed_status_starts_over_instead_of_failing() -> None:
    ledger = MonitorLedger.from_status({"gpuUsageTotals": {"windows": "many"}, "gpuMonitors": [{"x": 1}]})
    assert ledger.totals.windows == 0 and ledger.last_ends == {}


def test_how_far_back_the_log_is_read() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert since_seconds(None, now) is None
    assert since_seconds(now.timestamp() - 95.5, now) == 96 + CLOCK_SKEW_MARGIN_S
    assert since_seconds(now.timestamp() + 30, now) == 1 + CLOCK_SKEW_MARGIN_S  # node clock ahead
    pod = {"metadata": {"name": "p-n0", "uid": "u9", "labels": {"gpuctl.dev/attempt": "2"}}}
    assert monitor_key(pod) == "p-n0/u9"
    del pod["metadata"]["uid"]
    assert monitor_key(pod) == "p-n0/attempt-2"


def _undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Fields a structural schema would prune (the API server drops undeclared status fields)."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return [p for k, v in value.items()
                for p in ([f"{path}.{k}"] if k not in props else _undeclared(v, props[k], f"{path}.{k}"))]  # fmt: skip
    if isinstance(value, list):
        return [p for v in value for p in _undeclared(v, schema.get("items", {}), f"{path}[]")]
    return []


def test_status_fields_fit_the_crd_schema(lines: list[str]) -> None:
    ledger = MonitorLedger(message="GPU monitor: x; utilization not measured")
    ledger.take("p-n0/u1", "".join(lines))
    status = ledger.status_fields()
    assert set(status) == {"gpuUsage", "gpuUsageTotals", "gpuMonitors", "gpuMonitorMessage", "gpuActivity"}
    schema = gpujob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    jsonschema.Draft4Validator(schema).validate(status)
    assert _undeclared(status, schema, "status") == []
    assert _undeclared({"gpuUsage": {"bogus": 1}}, schema, "status") == ["status.gpuUsage.bogus"]
