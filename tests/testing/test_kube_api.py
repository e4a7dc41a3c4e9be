"""The testing kit's emulated API server and the operator it runs: objects named by ``generateName`` as
the API server names them, and an operator that stops without touching the test's own tasks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from orchestrator.testing.kube_api import KubeApi
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator
__all__ = ["handlers"]  # importing it registers the operator's handlers


async def test_objects_named_by_generate_name_get_distinct_names() -> None:
    async with KubeApi() as api:
        for message in ("one", "two"):
            body = {"metadata": {"generateName": "kopf-event-"}, "message": message, "involvedObject": {}}
            await api.call(api.core.create_namespaced_event, "default", body)
        listing = await api.call(api.core.list_namespaced_event, "default")
        names = [e.metadata.name for e in listing.items]
        assert len(set(names)) == 2 and all(n.startswith("kopf-event-") for n in names), names
        assert sorted(e.message for e in listing.items) == ["one", "two"]


async def test_stopping_the_operator_leaves_the_tests_tasks_and_threads_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf cancels every task it finds in its event loop when it stops: it runs in a loop of its own,
    so a task the test started meanwhile goes on, and no handler thread outlives the operator."""
    async with KubeApi() as api:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", api.url)
        await api.start_operator()
        release = asyncio.Event()

        async def the_tests_own_work() -> str:
            await release.wait()
            return "done"

        work = asyncio.create_task(the_tests_own_work())
        await api.stop_operator()
        assert not work.done()
        release.set()
        assert await work == "done"
        assert not [
            t.name for t in threading.enumerate() if t.name.startswith(("kopf-operator", "kopf-handler"))
        ]
