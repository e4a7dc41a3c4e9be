"""Deleting a GPUJob while its tick runs, against the real operator on kmock.

kopf waits for a running timer to end before it runs the delete handler, and looks again only after
``settings.background.cancellation_polling``; the operator keeps that short, so a deletion that lands
mid-tick goes on as soon as the tick ends instead of a minute later."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kubernetes.client as k8s
import pytest

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from tests.operators.kubernetes.operator_cluster import (
    NS,
    Cluster,
    start_running,
)
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator


async def test_a_deletion_during_a_tick_goes_on_when_the_tick_ends(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_running(cluster, "mid-tick", 1)

    in_tick, release = threading.Event(), threading.Event()
    real = handlers.reconcile_isolated

    def slow_tick(*args: Any, **kwargs: Any) -> Any:
        if not in_tick.is_set():
            in_tick.set()
            release.wait(timeout=30)  # the tick is still running when the deletion arrives
        return real(*args, **kwargs)

    monkeypatch.setattr(handlers, "reconcile_isolated", slow_tick)
    await cluster.wait_for("a tick in progress", _is_set(in_tick))
    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "mid-tick")
    await asyncio.sleep(1.0)  # kopf sees the deletion while the tick still runs
    release.set()

    async def gone() -> bool:
        try:
            await cluster.job("mid-tick")
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    await cluster.wait_for("the GPUJob deleted", gone, timeout=30)  # kopf's default: 60 s after the tick
    assert await cluster.pods() == []


def _is_set(event: threading.Event) -> Any:
    async def check() -> bool:
        return event.is_set()

    return check
