"""One GPUJob's bad data never freezes it nor stops the operator (issue 29): an unexpected exception in
its pass ends it FAILED (internal_error) through the engine, its pods deleted, one event; a fault around
it (the API server) propagates for kopf to retry; no status body carries a non-finite number.
An in-memory API (tests/operators/kubernetes/test_kube_crash.py), no server."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import subprocess
from datetime import timedelta
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import NewConnectionError

from operators.kubernetes import reconcile as operator_reconcile
from operators.kubernetes import step as operator_step
from operators.kubernetes.reconcile import permanent_failure, reconcile_isolated
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.progress import with_progress
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.controller import loop
from orchestrator.errors import InternalError, NotFoundError, SpecError, TemporaryError, UserError
from tests.operators.kubernetes.operator_handlers import handlers
from tests.operators.kubernetes.test_kube_crash import NOW, FakeApi, fake

__all__ = ["fake"]


def reconcile(at: timedelta = timedelta()) -> operator_step.Decision | None:
    return reconcile_isolated("j", "default", KubeConfig(), NOW + at)


def running(api: FakeApi) -> None:
    """The job placed and its two pods running (no progress line: running pods stand in): RUNNING."""
    reconcile()
    api.set_phase("Running")
    reconcile(timedelta(seconds=10))
    assert api.job["status"]["state"] == "RUNNING" and sorted(api.pods) == ["j-n0", "j-n1"]


def assert_failed_internally(api: FakeApi, decision: operator_step.Decision | None, what: str) -> None:
    status = api.job["status"]
    assert (status["state"], status["failureReason"]) == ("FAILED", "internal_error")
    assert what in status["message"] and status["message"].startswith("gpuctl could not handle this job")
    # through the engine: the nodes ended, the open segment closed, the Failed condition set
    assert {n["launch"] for n in status["attemptNodes"]} == {"ended"}
    assert all(s.get("end") for s in status["segments"])
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True"
    assert api.pods == {}  # deleted: billed no more
    assert decision is not None and decision.status == status
    (event,) = [e for e in decision.events if e.startswith("FAILED")]
    assert what in event


@pytest.mark.parametrize("error", [ValueError("bad"), OverflowError("inf"), TypeError("x"), KeyError("k")])
def test_an_unexpected_error_in_a_pass_fails_the_job_through_the_engine(
    fake: FakeApi,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    running(fake)

    def broken(status: Any) -> Any:
        raise error

    monkeypatch.setattr(operator_step, "progress_of", broken)  # any bug of the operator's own code
    decision = reconcile(timedelta(minutes=1))
    assert_failed_internally(fake, decision, type(error).__name__)
    # ended: later passes change nothing and raise nothing
    ended = json.loads(json.dumps(fake.job["status"]))
    assert reconcile(timedelta(minutes=2)) is None and fake.job["status"] == ended


@pytest.mark.parametrize(
    "error",
    [
        TemporaryError("cannot list pods: API server busy (503)", "retry later"),
        ConnectionResetError("reset by peer"),
        ApiException(status=500, reason="Internal Server Error"),
        NewConnectionError(None, "refused"),  # type: ignore[arg-type]
        UserError("cannot update status of GPUJob j: the API server rejected it (conflict)"),
    ],
)
def test_a_fault_around_the_job_propagates_and_changes_nothing(
    fake: FakeApi,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    running(fake)
    before = json.loads(json.dumps(fake.job["status"]))

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(client, "list_job_pods", unreachable)
    with pytest.raises(type(error)):
        reconcile(timedelta(minutes=1))
    assert fake.job["status"] == before and sorted(fake.pods) == ["j-n0", "j-n1"]


def test_a_poisoned_progress_line_never_freezes_the_job(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``{"step": 1e400}`` (infinity): the job ends FAILED (internal_error), or the line is ignored;
    either way the pass ends and the status written holds only finite numbers."""
    running(fake)
    poisoned = (
        PROGRESS_LINE_PREFIX + '{"time": "' + (NOW + timedelta(seconds=20)).isoformat() + '", "step": 1e400}'
    )
    monkeypatch.setattr(client, "read_container_log", lambda *a, **k: poisoned)
    decision = reconcile(timedelta(minutes=1))
    status = fake.job["status"]
    if status["state"] == "FAILED":
        assert_failed_internally(fake, decision, "OverflowError")
    else:
        assert status["state"] == "RUNNING" and "progress" not in status
    json.dumps(status, allow_nan=False)


def test_a_status_the_engine_cannot_read_is_failed_afresh(fake: FakeApi) -> None:
    running(fake)
    fake.job["status"] = {**fake.job["status"], "state": "BOGUS", "segments": "not a list"}
    decision = reconcile(timedelta(minutes=1))
    status = fake.job["status"]
    assert (status["state"], status["failureReason"]) == ("FAILED", "internal_error")
    assert "ValueError" in status["message"] and fake.pods == {}
    assert decision is not None and any(e.startswith("FAILED") for e in decision.events)


def test_a_gone_job_is_left_alone(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    running(fake)
    calls = iter([ValueError("bug"), NotFoundError("gone")])

    def get_gpujob(*args: Any, **kwargs: Any) -> Any:
        raise next(calls)

    monkeypatch.setattr(client, "get_gpujob", get_gpujob)
    assert reconcile(timedelta(minutes=1)) is None


def test_the_rule_is_the_local_controllers() -> None:
    errors: list[BaseException] = [
        ValueError("x"), OverflowError("x"), TypeError("x"), KeyError("x"), RuntimeError("x"),
        AssertionError("x"), InternalError("x"), SpecError("job", ["a: b"]), TemporaryError("x"),
        UserError("x"), NotFoundError("x"), OSError("x"), ConnectionError("x"),
        sqlite3.OperationalError("x"), subprocess.TimeoutExpired("x", 1.0),
    ]  # fmt: skip
    for exc in errors:
        assert isinstance(exc, Exception)
        local = loop.permanent_failure(exc)
        if isinstance(exc, sqlite3.OperationalError | subprocess.SubprocessError):
            continue  # the local controller's own faults (its database, sbatch): not the operator's
        assert permanent_failure(exc) == local, exc
    assert permanent_failure(ApiException(status=503)) is None
    assert permanent_failure(NewConnectionError(None, "refused")) is None  # type: ignore[arg-type]


# --- finding 11: no non-finite number reaches the API server -----------------------------------------
class Recorder:
    """The custom-objects API, as the real client calls it: the body as the server would get it."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def patch_namespaced_custom_object_status(self, *args: Any) -> dict[str, Any]:
        self.bodies.append(json.dumps(args[-1], allow_nan=False))
        return {}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_status_writer_refuses_non_finite_numbers(monkeypatch: pytest.MonkeyPatch, bad: float) -> None:
    recorder = Recorder()
    monkeypatch.setattr(client, "_custom_api", lambda api: recorder)
    client.patch_gpujob_status("j", "default", {"progress": {"step": 3, "loss": 0.5}})
    with pytest.raises(InternalError, match=r"status\.progress\.loss is"):
        client.patch_gpujob_status("j", "default", {"progress": {"step": 3, "loss": bad}})
    with pytest.raises(InternalError, match=r"status\.segments\[1\]\.nodes is"):
        client.patch_gpujob_status("j", "default", {"segments": [{}, {"nodes": bad}]})
    assert len(recorder.bodies) == 1


def test_a_non_finite_value_in_a_pass_fails_the_job_and_is_never_sent(
    fake: FakeApi,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running(fake)
    sent: list[dict[str, Any]] = []
    fake_patch = fake.patch_gpujob_status

    def patch(name: str, namespace: str, body: dict[str, Any], api: Any = None) -> None:
        client.check_finite({"status": body}, "update status")  # what the real writer does first
        sent.append(body)
        fake_patch(name, namespace, body, api)

    monkeypatch.setattr(client, "patch_gpujob_status", patch)

    def nan_loss(status: Any, logs: Any) -> dict[str, Any]:
        updated = with_progress(status, logs)
        return {**updated, "progress": {"step": 5, "loss": math.nan, "finished": False,
                                        "time": (NOW + timedelta(seconds=50)).isoformat()}}  # fmt: skip

    monkeypatch.setattr(operator_reconcile, "with_progress", nan_loss)  # a bug letting NaN through
    decision = reconcile(timedelta(minutes=1))
    assert_failed_internally(fake, decision, "status.progress.loss is nan")
    for body in sent:
        json.dumps(body, allow_nan=False)


# --- the kopf handlers: a transient fault is retried, and said once --------------------------------
def test_a_transient_fault_is_a_kopf_retry_posted_once_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    faults: list[Exception | None] = [
        TemporaryError("cannot list pods of j: API server busy (503 x)", "retry later"),
        TemporaryError("cannot list pods of j: API server busy (503 x)", "retry later"),
        ConnectionRefusedError("refused"),
        None,
    ]
    warned: list[str] = []

    def reconcile_isolated(*args: Any) -> None:
        fault = faults.pop(0)
        if fault is not None:
            raise fault

    monkeypatch.setattr(handlers, "reconcile_isolated", reconcile_isolated)
    monkeypatch.setattr(handlers, "_api", lambda: None)
    monkeypatch.setattr(kopf, "warn", lambda body, *, reason, message: warned.append(f"{reason}: {message}"))
    logger = logging.getLogger("test")
    for _ in range(3):
        with pytest.raises(kopf.TemporaryError):
            handlers._reconcile("j", "default", {}, logger)
    assert warned == [
        "ControllerError: cannot list pods of j: API server busy (503 x)",
        "ControllerError: ConnectionRefusedError: refused",
    ]
    handlers._reconcile("j", "default", {}, logger)  # works again: forgotten
    assert ("default", "j") not in handlers._errors
