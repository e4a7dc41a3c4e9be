"""Budgets on the testing kit's simulated cluster, the real operator watching every namespace: a
GPUJob naming a team its namespace may not charge is refused; a team's and a user's spend count the
GPUJobs of every namespace; a user's job beyond ``max_jobs`` waits PENDING, then starts when one ends.

On Kubernetes a GPUJob's user is its namespace (:func:`orchestrator.backends.kubernetes.gpujob.job_spec`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.testing.kube_cluster import SimulatedKubeCluster
from orchestrator.times import iso_z
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

BUDGETS = (
    "budgets:\n"
    "  teams: {ml: 100, cv: 100000, sandbox: 100000}\n"
    "  namespace_teams: {ml: [ml], cv: [cv, ml], sandbox: [sandbox]}\n"
    "  default_user: {max_jobs: 1}\n"
    "  users: {cv: {monthly_usd: 120}}\n"
)
"""ml's $100 is charged from ml and cv; user (namespace) cv may spend $120 a month."""


def gpujob(name: str, namespace: str, team: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "1",
        },
        "spec": {
            "team": team,
            "command": "train.py",
            "image": "example.com/train:1",
            "resources": {"gpu_types": ["H100"], "gpus_per_node": 1, "nodes": 1},
            "market": {"mode": "on-demand"},
        },
    }


def spent_status(usd: float, now: datetime) -> dict[str, Any]:
    """One closed segment of ``usd`` (one hour at that price) that ended at ``now``."""
    segment = {
        "start": iso_z(now - timedelta(hours=1)),
        "end": iso_z(now),
        "nodes": 1,
        "nodePriceUsdPerHour": usd,
    }
    return {"state": "SUCCEEDED", "segments": [segment]}


@pytest_asyncio.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SimulatedKubeCluster]:
    """The cluster with spent GPUJobs in namespaces ml and cv, then the operator started."""
    config = tmp_path / "costs.yaml"
    config.write_text(BUDGETS)
    monkeypatch.setenv(COST_CONFIG_ENV, str(config))
    async with SimulatedKubeCluster() as sim:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", sim.url)
        now = sim.clock.now()
        for name, namespace, team, usd in (("old-ml", "ml", "ml", 60.0), ("old-cv", "cv", "ml", 39.0),
                                           ("old-cv2", "cv", "cv", 119.5)):  # fmt: skip
            await create(sim, gpujob(name, namespace, team))
            await sim.call(sim.custom.patch_namespaced_custom_object_status, GROUP, VERSION, namespace, PLURAL,
                           name, {"status": spent_status(usd, now)})  # fmt: skip
        assert handlers is not None
        await sim.start_operator()
        yield sim


async def create(sim: SimulatedKubeCluster, body: dict[str, Any]) -> None:
    namespace = body["metadata"]["namespace"]
    await sim.call(sim.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body)


async def status_when(sim: SimulatedKubeCluster, name: str, namespace: str, state: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def probe() -> dict[str, Any] | None:
        job = await sim.call(sim.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)
        seen.update(job.get("status") or {})
        return seen if seen.get("state") == state else None

    try:
        found: dict[str, Any] = await sim.wait_for(f"{namespace}/{name} {state}", probe)
    except AssertionError as err:
        raise AssertionError(f"{err}; its status: {seen.get('state')}: {seen.get('message')}") from None
    return found


async def test_a_team_its_namespace_may_not_charge_is_refused(cluster: SimulatedKubeCluster) -> None:
    await create(cluster, gpujob("dodge", "sandbox", "cv"))
    status = await status_when(cluster, "dodge", "sandbox", "FAILED")
    assert status["failureReason"] == "invalid_spec"
    assert status["message"].startswith(
        "team 'cv' may not be charged from namespace 'sandbox': it may charge only 'sandbox' (budgets.namespace_teams)"
    )


async def test_spend_counts_the_gpujobs_of_every_namespace(cluster: SimulatedKubeCluster) -> None:
    await create(cluster, gpujob("more-ml", "ml", "ml"))  # team ml: $60 in ml + $39 in cv spent
    status = await status_when(cluster, "more-ml", "ml", "FAILED")
    assert status["failureReason"] == "over_budget"
    assert "team 'ml' has $1.00 left of its $100.00 monthly budget (spent $99.00)" in status["message"]
    await create(cluster, gpujob("more-cv", "cv", "cv"))  # user cv: $39 + $119.50 of GPUJobs in cv
    status = await status_when(cluster, "more-cv", "cv", "FAILED")
    assert status["failureReason"] == "over_budget"
    assert "user 'cv' has $0.00 left of its $120.00 monthly budget (spent $158.50)" in status["message"]


async def test_a_users_job_beyond_max_jobs_waits_then_starts(cluster: SimulatedKubeCluster) -> None:
    await create(cluster, gpujob("first", "sandbox", "sandbox"))
    await status_when(cluster, "first", "sandbox", "LAUNCHING")
    await create(cluster, gpujob("second", "sandbox", "sandbox"))
    status = await status_when(cluster, "second", "sandbox", "PENDING")

    async def waiting() -> dict[str, Any] | None:
        job = await cluster.call(
            cluster.custom.get_namespaced_custom_object, GROUP, VERSION, "sandbox", PLURAL, "second"
        )
        conditions = (job.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Waiting" and c["status"] == "True"), None)

    condition = await cluster.wait_for("second's Waiting condition", waiting)
    assert "user 'sandbox' has 1 job(s) running or ahead in line" in condition["message"]
    assert status["state"] == "PENDING"
    await cluster.call(
        cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, "sandbox", PLURAL, "first"
    )
    await status_when(cluster, "second", "sandbox", "LAUNCHING")
