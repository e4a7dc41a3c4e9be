"""Stored text reaches the terminal with no control character (issue 29, finding 8).

Names, teams, users, messages, reasons, event texts, metrics names, zones and log lines are written by
job code, by another user or by whoever can edit a GPUJob: an ESC sequence, an OSC 8 hyperlink, a BEL,
a C1 CSI (0x9b) or a bidi override in them must come out escaped (visible, inert), and rich markup in
them shown as it is, from `list`, `status`, `events` and `logs`, on the local backend and on Kubernetes.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kubernetes.client as k8s
import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.cli.main import main
from orchestrator.controller.actions import RecordEvent, SetWaiting, StartAttempt, Transition
from orchestrator.spec import load_spec_text
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.terminal import terminal_text
from orchestrator.testing.kube_api import KubeApi
from orchestrator.testing.pod_logs import FakePodLogs
from orchestrator.testing.states import SPOT, drive, through
from tests.cli.test_kube_events_logs import _event, _pod
from tests.cli.test_kube_jobs_cli import use_emulator

ESC = "\x1b[2J\x1b[31mred"
OSC8 = "\x1b]8;;https://evil.example/\x07click me\x1b]8;;\x07"
C1 = "\x9b2Jcsi"
BIDI = "\u202eexe.txt"
MARKUP = "[bold red]x[/bold red]"
HOSTILE = f"{ESC} {OSC8} {C1} {BIDI} \x07bel {MARKUP}"
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}
NOW = datetime.now(UTC) - timedelta(hours=1)
K = ("--backend", "kubernetes", "--namespace", "ml")


def unsafe_chars(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (newline ends a line: allowed)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in UNSAFE]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_terminal_text_escapes_every_control_and_keeps_the_rest() -> None:
    shown = terminal_text(HOSTILE)
    assert unsafe_chars(shown) == [] and "\\x1b[2J" in shown and "\\x9b" in shown and "\\u202e" in shown
    assert MARKUP in shown and "click me" in shown
    assert terminal_text("naïve 東京 ✓ [x]") == "naïve 東京 ✓ [x]"
    assert terminal_text("a\tb\nc") == "a\\x09b\\x0ac", "one line stays one line"
    assert terminal_text("a\tb\nc\r\x1b", multiline=True) == "a\tb\nc\\x0d\\x1b"
    assert terminal_text("\U000e0001\u2028\ud800") == "\\U000e0001\\u2028\\ud800"


@pytest.fixture
def local_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """Two jobs whose every stored text is hostile: one running (segment, waiting reason, events),
    one failed (message, final metrics, an output log)."""
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "400")
    store = JobStore(tmp_path)
    spec = load_spec_text("name: esc\ncommand: train.py\n").model_dump_json()
    ids = []
    for name in (f"esc{ESC}", "failed"):
        job = store.create_job(name=name, user=HOSTILE, team=HOSTILE, backend="local", spec_json=spec,
                               deadline=None, now=NOW)  # fmt: skip
        ids.append(job.id)
    placement = replace(SPOT, gpu_type=HOSTILE, instance_type=HOSTILE, region=HOSTILE, zone=HOSTILE,
                        price_source=HOSTILE)  # fmt: skip
    drive(
        store, ids[0], NOW, *through(JobStatus.PLACING, JobStatus.LAUNCHING), StartAttempt(placement, 1),
        SetWaiting("no_spot", HOSTILE), RecordEvent(HOSTILE, HOSTILE),
    )  # fmt: skip
    drive(store, ids[1], NOW, Transition(JobStatus.FAILED, HOSTILE, FailureReason.INTERNAL_ERROR))
    store.set_summary(ids[1], {"step": 3, "loss": 0.5, "metrics": {HOSTILE: 1.0}})
    log = tmp_path / "jobs" / ids[1] / "attempt-1" / "failed-n0" / "output.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"step 1\tok\n{HOSTILE}\nprogress 10%\rprogress 20%\n")
    return tmp_path, ids


@pytest.mark.parametrize("output", ["table", "wide"])
def test_local_list_has_no_control_character(
    local_home: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], output: str
) -> None:
    code, out = _cli(capsys, "list", "-o", output)
    assert code == 0 and unsafe_chars(out) == [], out
    assert MARKUP in out and "\\x1b[31mred" in out and "\\u202e" in out


def test_local_status_and_events_have_no_control_character(
    local_home: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, ids = local_home
    for job_id in ids:
        for command in ("status", "events"):
            code, out = _cli(capsys, command, job_id)
            assert code == 0 and unsafe_chars(out) == [], (command, out)
            assert "\\x1b]8;;https://evil.example/\\x07click me" in out
    _, failed = _cli(capsys, "status", ids[1])
    assert f"final metrics: {terminal_text(HOSTILE)} 1.0000" in failed
    _, events = _cli(capsys, "events", ids[0])
    assert events.count("\\x9b2Jcsi") == 4, (
        "the zone of the attempt and segment events, the other's kind and message"
    )
    code, doc = _cli(capsys, "status", ids[0], "-o", "json")
    assert code == 0 and json.loads(doc)["user"] == HOSTILE, "JSON keeps the value (escaped by JSON)"


def test_local_logs_escape_the_jobs_output_but_keep_its_lines_and_tabs(
    local_home: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, ids = local_home
    code, out = _cli(capsys, "logs", ids[1])
    assert code == 0 and unsafe_chars(out.replace("\t", "")) == [], out
    assert out.splitlines() == [
        "[attempt-1/n0] step 1\tok",
        f"[attempt-1/n0] {terminal_text(HOSTILE)}",
        "[attempt-1/n0] progress 10%",
        "[attempt-1/n0] progress 20%",
    ]


@pytest_asyncio.fixture
async def pod_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakePodLogs]:
    monkeypatch.setenv("COLUMNS", "400")
    async with KubeApi(namespace="ml") as api:
        use_emulator(tmp_path, api.url, monkeypatch)
        yield api.logs


def _hostile_gpujob() -> None:
    """A GPUJob made with kubectl (no gpuctl validation): a hostile team, then hostile status fields,
    conditions, an Event and a log line, as a cluster or the job's own code could write them."""
    spec = load_spec_text("name: esc\ncommand: train.py\n")
    body = client.gpujob_manifest(spec, "ml")
    body["spec"]["team"] = HOSTILE
    k8s.CustomObjectsApi(client.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, body
    )
    condition = {"type": "Placed", "status": "True", "reason": HOSTILE, "message": HOSTILE,
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}  # fmt: skip
    segment = {"start": "2026-11-22T10:00:00+00:00", "nodes": 1, "gpuType": HOSTILE, "market": HOSTILE,
               "nodePriceUsdPerHour": 1.0}  # fmt: skip
    status = {"state": "FAILED", "failureReason": HOSTILE, "message": HOSTILE, "user": HOSTILE,
              "conditions": [condition], "segments": [segment], "gpuMonitorMessage": HOSTILE}  # fmt: skip
    client.patch_gpujob_status("esc", "ml", status)
    _event("esc", "GPUJob", HOSTILE, HOSTILE, "2026-11-22T10:05:00Z")
    _pod("esc-n0", job="esc")


@pytest.mark.asyncio
async def test_kubernetes_list_status_events_logs_have_no_control_character(
    pod_logs: FakePodLogs, capsys: pytest.CaptureFixture[str]
) -> None:
    await asyncio.to_thread(_hostile_gpujob)
    pod_logs.write("ml", "esc-n0", "trainer", f"step 1\n{HOSTILE}")
    capsys.readouterr()
    for args in (("list",), ("list", "-o", "wide"), ("status", "esc"), ("events", "esc"), ("logs", "esc")):
        code, out = await asyncio.to_thread(_cli, capsys, *args, *K)
        assert code == 0 and unsafe_chars(out) == [], (args, out)
        assert "\\x1b]8;;https://evil.example/\\x07click me" in out, (args, out)
    code, out = await asyncio.to_thread(_cli, capsys, "list", *K)
    assert MARKUP in out, "markup is shown, not applied"


@pytest.mark.parametrize("by", ["job", "user", "team"])
@pytest.mark.parametrize("output", ["table", "csv"])
def test_cost_report_has_no_control_character(
    local_home: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], by: str, output: str
) -> None:
    code, out = _cli(capsys, "cost", "report", "--by", by, "-o", output)
    assert code == 0 and unsafe_chars(out) == [], out
    if by != "job":
        assert "\\x1b[2J" in out and "\\u202e" in out, "the name is shown, escaped"
