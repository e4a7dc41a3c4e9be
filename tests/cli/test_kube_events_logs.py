"""`gpuctl events` and `gpuctl logs -f` with `--backend kubernetes` against kmock's emulated API server:
events are the GPUJob's conditions and the Events the operator posted about it; logs follow the pods'
trainer output until the GPUJob is terminal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes import client
from orchestrator.cli import kube_jobs
from orchestrator.cli.main import main
from orchestrator.testing.kube_api import KubeApi
from orchestrator.testing.pod_logs import FakePodLogs
from tests.cli.test_kube_jobs_cli import use_emulator
from tests.cli.test_logs_view import AGENT_TRACEBACK, CRASH, NOTICE, T0

K = ("--backend", "kubernetes", "--namespace", "ml")


@pytest_asyncio.fixture
async def pod_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakePodLogs]:
    async with KubeApi(namespace="ml") as api:  # the testing kit's API emulator, with pod logs
        use_emulator(tmp_path, api.url, monkeypatch)
        yield api.logs


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _gpujob(tmp_path: Path, status: dict[str, Any]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: trainer\ncommand: train.py\n")
    assert main(["submit", str(job), *K, "--detach"]) == 0
    client.patch_gpujob_status("trainer", "ml", status)


def _pod(name: str, job: str = "trainer", attempt: int = 1, node_index: int = 0) -> None:
    labels = {
        "gpuctl.dev/job": job,
        "gpuctl.dev/attempt": str(attempt),
        "gpuctl.dev/node-index": str(node_index),
    }
    client.create_pod({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": "ml", "labels": labels},
                       "spec": {"containers": [{"name": "trainer", "image": "x"}]}})  # fmt: skip


def _event(about: str, kind: str, reason: str, message: str, at: str) -> None:
    """An Event as kopf posts the operator's `logger.info(...)` about a resource (kopf lets the server
    generate its name; kmock does not)."""
    body = {"metadata": {"name": f"{about}.{at}", "namespace": "ml"}, "type": "Normal",
            "reason": reason, "message": message, "source": {"component": "kopf"},
            "involvedObject": {"apiVersion": "gpuctl.dev/v1alpha1", "kind": kind, "name": about, "namespace": "ml"},
            "firstTimestamp": at, "lastTimestamp": at, "eventTime": at}  # fmt: skip
    k8s.CoreV1Api(client.api_client()).create_namespaced_event("ml", body)


def _setup_events(tmp_path: Path) -> None:
    conditions = [
        {"type": "Placed", "status": "True", "reason": "Placed", "message": "1 x A10G spot in us-east-1a",
         "lastTransitionTime": "2026-11-22T10:00:00Z"},
        {"type": "Running", "status": "False", "reason": "Preempted", "message": "spot capacity reclaimed",
         "lastTransitionTime": "2026-11-22T10:30:00Z"},
    ]  # fmt: skip
    _gpujob(tmp_path, {"state": "RECOVERING", "attempt": 1, "conditions": conditions})
    _event("trainer", "GPUJob", "Logging", "RUNNING: all nodes running", "2026-11-22T10:05:00Z")
    _event("trainer", "GPUJob", "Logging", "PREEMPTED: node trainer-n0 evicted", "2026-11-22T10:30:01Z")
    _event("other", "GPUJob", "Logging", "not about this job", "2026-11-22T10:10:00Z")
    _event("trainer", "Pod", "Scheduled", "a pod of the same name", "2026-11-22T10:11:00Z")


@pytest.mark.asyncio
async def test_events_are_the_conditions_and_the_events_about_the_gpujob(
    pod_logs: FakePodLogs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await asyncio.to_thread(_setup_events, tmp_path)
    capsys.readouterr()
    code, out, _ = await asyncio.to_thread(_cli, capsys, "events", "trainer", *K, "-o", "json")
    events = json.loads(out)
    assert code == 0 and [e["message"] for e in events] == [
        "1 x A10G spot in us-east-1a",
        "RUNNING: all nodes running",
        "spot capacity reclaimed",
        "PREEMPTED: node trainer-n0 evicted",
    ]
    assert [e["kind"] for e in events] == ["Placed=True", "Logging", "Running=False", "Logging"]
    code, out, _ = await asyncio.to_thread(_cli, capsys, "events", "trainer", *K)
    assert code == 0 and out.splitlines()[1].startswith("2026-11-22T10:05:00+00:00  Logging ")


@pytest.mark.asyncio
async def test_logs_follow_the_trainer_until_the_gpujob_ends(
    pod_logs: FakePodLogs, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def start() -> None:
        _gpujob(tmp_path, {"state": "RUNNING", "attempt": 1})
        _pod("trainer-n0")
        _pod("someone-else-n0", job="someone-else")

    await asyncio.to_thread(start)
    capsys.readouterr()
    pod_logs.write("ml", "trainer-n0", "trainer", "step 1")
    pod_logs.write("ml", "trainer-n0", "monitor", "a monitor window")
    pod_logs.write("ml", "someone-else-n0", "trainer", "not ours")
    # each wait between two reads of the logs is one step of the job: no real time passes
    steps: list[Callable[[], None]] = [
        lambda: pod_logs.write("ml", "trainer-n0", "trainer", "step 2"),
        lambda: _pod("trainer-n1"),
        lambda: pod_logs.write("ml", "trainer-n1", "trainer", "n1 joined"),
        lambda: (pod_logs.write("ml", "trainer-n0", "trainer", "step 3\ndone"),
                 client.patch_gpujob_status("trainer", "ml", {"state": "SUCCEEDED"})),
    ]  # fmt: skip
    monkeypatch.setattr(kube_jobs.time, "sleep", lambda _s: steps.pop(0)())

    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "-f", "--no-timestamps")
    assert code == 0 and not steps, "it stopped once the GPUJob succeeded, not before"
    assert out.splitlines() == [
        "[trainer-n0] step 1",
        "[trainer-n0] step 2",
        "[trainer-n1] n1 joined",
        "[trainer-n0] step 3",
        "[trainer-n0] done",
    ]
    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "--no-timestamps")
    assert code == 0 and out.count("[trainer-n0] step") == 3 and "[trainer-n1] n1 joined" in out


@pytest.mark.asyncio
async def test_logs_follow_stops_when_the_gpujob_is_deleted(
    pod_logs: FakePodLogs, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(_gpujob, tmp_path, {"state": "PENDING"})
    capsys.readouterr()
    monkeypatch.setattr(kube_jobs.time, "sleep", lambda _s: client.delete_gpujob("trainer", "ml"))
    code, out, err = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "-f")
    assert code == 0 and out == "" and "gpujob/trainer was deleted" in err


def _preempted_pods(pod_logs: FakePodLogs) -> None:
    """Attempt 2's pods (n0 preempted, its agent's traceback; n1 crashed), as the API server has them."""
    _gpujob_running = {"state": "RUNNING", "attempt": 2}
    client.patch_gpujob_status("trainer", "ml", _gpujob_running)
    _pod("trainer-n0", attempt=2, node_index=0)
    _pod("trainer-n1", attempt=2, node_index=1)
    at = T0.timestamp()
    pod_logs.write("ml", "trainer-n0", "trainer", f"step 1\n{NOTICE}\n{AGENT_TRACEBACK}", at=at)
    pod_logs.write("ml", "trainer-n1", "trainer", CRASH, at=at + 1.5)


@pytest.mark.asyncio
async def test_logs_show_each_lines_time_and_fold_the_agents_signal_traceback(
    pod_logs: FakePodLogs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32, item 4, on Kubernetes: the time the API server logged each line (asked with
    ``timestamps=true``), shown as for a local job; torchrun's traceback for the notice is one line."""
    await asyncio.to_thread(_gpujob, tmp_path, {"state": "PENDING"})
    await asyncio.to_thread(_preempted_pods, pod_logs)
    capsys.readouterr()
    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K)
    assert code == 0
    assert {r["timestamps"].lower() for r in pod_logs.requests if r.get("container") == "trainer"} == {"true"}
    assert out.splitlines() == [
        "[trainer-n0] 2026-11-26T07:29:11Z step 1",
        f"[trainer-n0] 2026-11-26T07:29:11Z {NOTICE}",
        "[trainer-n0] 2026-11-26T07:29:11Z gpuctl: torchrun agent (pid 1713) stopped by SIGTERM (a notice, a "
        "cancel or a stop); its traceback hidden, `gpuctl logs --raw` shows it",
        *(f"[trainer-n1] 2026-11-26T07:29:13Z {line}" for line in CRASH.splitlines()),
    ]
    shown = out.splitlines()
    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "--no-timestamps")
    assert out.splitlines() == [line.replace(" 2026-11-26T07:29:11Z", "").replace(" 2026-11-26T07:29:13Z", "")
                                for line in shown]  # fmt: skip
    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "--tail", "1")
    assert [line.split(" ", 2)[::2] for line in out.splitlines()] == [
        ["[trainer-n0]", AGENT_TRACEBACK.splitlines()[-1]],  # its start not read: shown as it is
        ["[trainer-n1]", "ValueError: shapes do not match"],
    ]
    code, out, _ = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "--raw")
    raw = out.splitlines()
    assert raw[0] == "[trainer-n0] 2026-11-26T07:29:11.859000000Z step 1"
    assert len(raw) == 2 + len(AGENT_TRACEBACK.splitlines()) + len(CRASH.splitlines())
    assert raw[len(AGENT_TRACEBACK.splitlines()) + 1].endswith("SignalException: Process 1713 got signal: 15")


@pytest.mark.asyncio
async def test_logs_attempt_and_node_choose_pods_by_their_labels(
    pod_logs: FakePodLogs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await asyncio.to_thread(_gpujob, tmp_path, {"state": "PENDING"})
    await asyncio.to_thread(_preempted_pods, pod_logs)
    capsys.readouterr()
    for node in ("n1", "trainer-n1"):
        code, out, _ = await asyncio.to_thread(
            _cli, capsys, "logs", "trainer", *K, "--attempt", "2", "--node", node
        )
        assert code == 0 and {line.split()[0] for line in out.splitlines()} == {"[trainer-n1]"}, out
    code, out, err = await asyncio.to_thread(_cli, capsys, "logs", "trainer", *K, "--attempt", "1")
    assert code != 0 and out == ""
    assert (
        "no pod of the job matches --attempt 1; it has: trainer-n0 (attempt 2, n0), trainer-n1 (attempt 2, n1)"
        in err
    )
