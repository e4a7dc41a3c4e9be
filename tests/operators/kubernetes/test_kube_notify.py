"""Notifications from the operator: the pass's decision carries them, budget shares are remembered in
the GPUJob's status, and the operator's outbox delivers them (a loopback webhook)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from operators.kubernetes import notify as operator_notify
from operators.kubernetes.step import fail
from orchestrator.notify import RetryPolicy
from orchestrator.spec.notify import NotifyEvent
from orchestrator.state.status import FailureReason
from tests.notify.receivers import WebhookReceiver, webhook_fixture  # noqa: F401 - fixture
from tests.operators.kubernetes.test_kube_step import T0, job, pod, run, running


def test_a_preemption_and_the_budget_notify_from_the_operator_pass() -> None:
    spec = job(2, goals={"budget_usd": 100.0})
    status = running(spec, 2)
    evicted = [pod("j-n0", 1), pod("j-n1", 1, "Failed", reason="Evicted")]
    d = run(spec, status, evicted, timedelta(hours=3))  # 2 nodes x 10 USD/h x 3 h: 60 % of the budget
    assert [(n.event, n.job, n.kind) for n in d.notifications] == [
        (NotifyEvent.BUDGET, "j", "budget"), (NotifyEvent.PREEMPTED, "j", "transition")
    ]  # fmt: skip
    assert d.notifications[0].evidence["percent"] == 50 and d.status["budgetAlerts"] == [50]
    again = run(spec, d.status, [], timedelta(hours=3, minutes=1))
    assert not [n for n in again.notifications if n.event is NotifyEvent.BUDGET]  # remembered in .status


def test_failing_a_job_notifies() -> None:
    d = fail({"state": "RUNNING", "team": "ml"}, "j", FailureReason.BACKEND_ERROR, "pod rejected", T0)
    ((note),) = d.notifications
    assert note.event is NotifyEvent.FAILED and note.team == "ml" and note.message == "pod rejected"


def test_the_operator_outbox_delivers(
    tmp_path: Path, webhook: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(operator_notify.OUTBOX_ENV, str(tmp_path / "outbox.db"))
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    d = fail({"state": "RUNNING"}, "j", FailureReason.BACKEND_ERROR, "pod rejected", T0)
    worker = operator_notify.start(lambda: None, RetryPolicy(first_delay_s=0.01))
    try:
        spec = {"notify": [{"webhook": webhook.url, "events": ["failed"]}], "team": "ml"}
        assert operator_notify.send_later(d.notifications, spec, "research", T0) == 1
        (body,) = webhook.wait_for(1)
        assert body["event"] == "failed" and body["namespace"] == "research"
        deadline = time.monotonic() + 10
        while worker.outbox.pending():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        operator_notify.stop()
