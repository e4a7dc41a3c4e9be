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


@pytest.mark.parametrize("history", [True, False])
async def test_lists_filter_by_label_and_requests_are_counted(history: bool) -> None:
    """As the API server: a list by label returns only the matching objects; a get, patch or delete by
    name finds the object however many others there are; with or without the log of requests, every
    request is counted by kind."""
    async with KubeApi(history=history) as api:
        for index in range(30):
            labels = {"gpuctl.dev/job": f"j{index % 3}", **({"extra": "x"} if index == 5 else {})}
            pod = {"metadata": {"name": f"p{index}", "labels": labels},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
            await api.call(api.core.create_namespaced_pod, "default", pod)
        listed = await api.call(api.core.list_namespaced_pod, "default", label_selector="gpuctl.dev/job=j1")
        assert sorted(p.metadata.name for p in listed.items) == sorted(f"p{i}" for i in range(1, 30, 3))
        both = await api.call(
            api.core.list_namespaced_pod, "default", label_selector="gpuctl.dev/job=j1,extra"
        )
        assert [p.metadata.name for p in both.items] == []
        other = await api.call(
            api.core.list_namespaced_pod, "default", label_selector="gpuctl.dev/job!=j1,extra"
        )
        assert [p.metadata.name for p in other.items] == ["p5"]
        await api.call(api.core.delete_namespaced_pod, "p7", "default")
        assert (await api.call(api.core.read_namespaced_pod, "p8", "default")).metadata.name == "p8"
        await api.call(api.core.patch_namespaced_pod, "p8", "default", {"metadata": {"labels": {"new": "y"}}})
        relisted = await api.call(api.core.list_namespaced_pod, "default", label_selector="new")
        assert [p.metadata.name for p in relisted.items] == ["p8"]
        assert len((await api.call(api.core.list_namespaced_pod, "default")).items) == 29
        counts = api.requests()
        assert counts["POST pods"] == 30 and counts["LIST pods"] == 5 and counts["DELETE pods"] == 1
        assert counts["GET pods"] == 1 and counts["PATCH pods"] == 1
        assert (len(list(api.emulator)) > 30) is history
