"""Property: random JSON values of every type in every field of progress records and monitor window
summaries (plus torn and non-UTF-8 lines) never raise out of any reader, and `gpuctl list`, `gpuctl status
JOB -o json` (strict JSON) and `gpuctl cost report` always succeed."""

from __future__ import annotations

import io
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.backends.kubernetes.gpu_usage import MonitorLedger, gpu_activity
from orchestrator.backends.kubernetes.progress import advance, progress_of, progress_records, with_progress
from orchestrator.backends.progress import read_progress, read_step_times
from orchestrator.cli import main as cli_main
from orchestrator.cli.status_document import kubernetes_document
from orchestrator.contract import PROGRESS_LINE_PREFIX, read_progress_records
from orchestrator.controller.measurements import gpu_measurements, monitor_usage
from orchestrator.costs.lost_work import lost_work_from_progress
from orchestrator.monitor.diagnosis import diagnose_files, read_step_timings
from orchestrator.monitor.progress_lines import ProgressFollower
from orchestrator.monitor.summary import read_summaries
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore, usage_from_files
from tests.cli.hostile_home import PROGRESS, WINDOW, gpuctl, running_job, strict_json, write_lines

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([0, -1, 10**15, 10**16, 2**63, 10**400, 1e300, -0.0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["2026-11-22T12:00:03+00:00", "2026-11-22T12:00:03", "9999-12-31T23:59:59Z", "\x1b[31m"]
    )
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
PROGRESS_KEYS = [*PROGRESS, "event"]
EVENTS = st.sampled_from([None, "finished", "preempted", "resumed", "checkpoint"])


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record)  # allow_nan: NaN, Infinity and -Infinity are written as a broken writer would


@st.composite
def progress_line(draw: st.DrawFn) -> str | bytes:
    base = {**PROGRESS, "event": draw(EVENTS)}
    record = {**base, **draw(st.dictionaries(st.sampled_from(PROGRESS_KEYS), JSON, max_size=4))}
    line = _line(record)
    return draw(st.sampled_from([line, line[: draw(st.integers(0, len(line)))], line.encode() + b"\xff"]))


@st.composite
def window_line(draw: st.DrawFn) -> str | bytes:
    if draw(st.booleans()):
        base: dict[str, Any] = {"kind": "gpuctl.monitor.unavailable", "reason": "no_nvml", "message": "m"}
    else:
        base = {**WINDOW, "per_gpu": [{"gpu": 0, "samples": draw(JSON)}]}
    record = {
        **base,
        **draw(st.dictionaries(st.sampled_from([*WINDOW, "reason", "message"]), JSON, max_size=4)),
    }
    line = _line(record)
    return draw(st.sampled_from([line, line[: draw(st.integers(0, len(line)))], b"\xfe" + line.encode()]))


def _read_everything(store: JobStore, job_id: str) -> None:
    """Every reader of the two files; none may raise."""
    job_dir = store.job_dir(job_id)
    progress, summary = job_dir / "progress.jsonl", job_dir / "monitor-summary-n0.jsonl"
    read_progress_records(progress)
    read_progress(progress)
    read_step_times(progress)
    lost_work_from_progress(progress)
    read_step_timings(progress)
    read_summaries(summary)
    diagnose_files(summary, progress)
    usage = UsageStore(store)
    usage.ingest(job_id, datetime.now(UTC))
    usage.windows(job_id), usage.activity(job_id), usage.idle_gpu_hours()
    assert usage.usage(job_id) == usage_from_files(job_dir)
    gpu_measurements(store, store.job(job_id), datetime.now(UTC), monitor_usage(store))
    out = io.StringIO()
    follower = ProgressFollower(str(progress), out, min_interval_s=0.0)
    follower.poll(), follower.flush()
    status = with_progress({}, [out.getvalue()])
    json.dumps(status, allow_nan=False)  # the GPUJob status patch body is strict JSON too
    progress_of(status), kubernetes_document({"status": status})
    advance(None, progress_records(out.getvalue()))
    raw = "\n".join(
        PROGRESS_LINE_PREFIX + line for line in progress.read_bytes().decode("utf-8", "replace").split("\n")
    )
    status = with_progress({}, [raw])  # what a sidecar that printed every line as it is would show
    json.dumps(status, allow_nan=False)
    progress_of(status), kubernetes_document({"status": status})
    ledger = MonitorLedger()
    ledger.take("pod/uid", summary.read_bytes().decode("utf-8", "replace"))
    json.dumps(ledger.status_fields(), allow_nan=False)
    gpu_activity(ledger.status_fields())


PARSER = cli_main.build_parser()
"""Built once: the commands parse the same way, and building the parser is most of a command's time."""


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    progress=st.lists(progress_line(), max_size=5),
    windows=st.lists(window_line(), max_size=4),
)
def test_no_reader_and_no_command_fails_on_any_record(
    progress: list[str | bytes], windows: list[str | bytes]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as env:
        env.setenv("GPUCTL_HOME", tmp)
        env.setattr(cli_main, "build_parser", lambda: PARSER)
        store = JobStore(Path(tmp))
        victim, other = running_job(store, "victim"), running_job(store, "other")
        write_lines(store.job_dir(victim) / "progress.jsonl", progress)
        write_lines(store.job_dir(victim) / "monitor-summary-n0.jsonl", windows)
        _read_everything(store, victim)
        code, out = gpuctl("list", "-o", "json")
        assert code == 0 and {d["id"] for d in strict_json(out)} == {victim, other}
        assert gpuctl("list")[0] == 0
        code, out = gpuctl("status", victim, "-o", "json")
        assert code == 0 and strict_json(out)["id"] == victim
        assert gpuctl("status", victim)[0] == 0
        code, out = gpuctl("cost", "report", "-o", "json")
        assert code == 0 and strict_json(out)
        assert gpuctl("cost", "report")[0] == 0
