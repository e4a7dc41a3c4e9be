"""Jobs in the SQLite store in states the controller writes, built the way it writes them.

A test that needs a job in some state (running on two spot nodes, preempted, failed) submits it with
:func:`submit` and drives it with real actions through :func:`drive`: the engine
(:func:`orchestrator.controller.engine.apply`) checks every transition against the table and makes the
events, and :func:`orchestrator.state.state_rows.save_state` writes the rows, in one transaction, as a
controller tick does. So a test holds only states the engine can write.

    job_id = submit(store, NOW, name="trainer")
    drive(store, job_id, NOW, *through(JobStatus.PLACING, JobStatus.LAUNCHING), StartAttempt(SPOT, 2))
    drive(store, job_id, later, CloseSegment("preempted"), Transition(JobStatus.PREEMPTED, "reclaimed"))
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator.backends.base import Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import engine
from orchestrator.controller.actions import Action, StartAttempt, Transition
from orchestrator.state.job_state import JobState
from orchestrator.state.state_rows import load_state, save_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore

SPOT = Placement(
    gpu_type="V100", market=MarketKind.SPOT, cloud="aws", region="us-east-1", zone="use1-az1",
    instance_type="p3.2xlarge", gpus_per_node=1, node_price_usd_per_hour=1.0,
    on_demand_node_price_usd_per_hour=3.0, price_source="test",
)  # fmt: skip
"""A spot V100 node at 1 USD an hour (3 on demand)."""


def submit(
    store: JobStore,
    now: datetime,
    *,
    name: str = "j",
    user: str = "u",
    team: str = "t",
    backend: str = "local",
    spec_json: str = "{}",
) -> str:
    """A new PENDING job (as ``gpuctl submit`` stores it); its id."""
    job = store.create_job(
        name=name, user=user, team=team, backend=backend, spec_json=spec_json, deadline=None, now=now
    )
    return job.id


def drive(
    store: JobStore, job_id: str, now: datetime, *actions: Action, alive: Sequence[str] = ()
) -> JobState:
    """Apply ``actions`` to the job's stored state with the engine and save the result in one transaction;
    the nodes the engine asks to launch are then marked launched, as a host does once the backend took
    them. ``alive``: the nodes a ``StopNodes`` without node ids stops."""
    old = load_state(store, job_id)
    applied = engine.apply(actions, old, job_id, alive, now)
    state = applied.state
    for effect in applied.effects:
        if isinstance(effect, engine.LaunchNodes):
            state = engine.mark_launched(state, effect.node_ids)
    with store.transaction() as conn:
        save_state(conn, job_id, old, state, applied.events, now)
    return state


def through(*targets: JobStatus, message: str | None = None) -> tuple[Transition, ...]:
    """Transitions to each of ``targets`` in turn, each with ``message`` (default: the state's name)."""
    return tuple(Transition(t, str(t).lower() if message is None else message) for t in targets)


def running_job(
    store: JobStore,
    now: datetime,
    *,
    placement: Placement = SPOT,
    nodes: int = 1,
    message: str = "running",
    name: str = "j",
    user: str = "u",
    team: str = "t",
    backend: str = "local",
    spec_json: str = "{}",
) -> str:
    """A job submitted at ``now`` and RUNNING since then: attempt 1 on ``nodes`` nodes of ``placement``
    (its segment open), ``message`` the running state's."""
    job_id = submit(store, now, name=name, user=user, team=team, backend=backend, spec_json=spec_json)
    drive(
        store, job_id, now,
        *through(JobStatus.PLACING, JobStatus.LAUNCHING), StartAttempt(placement, nodes),
        Transition(JobStatus.RUNNING, message),
    )  # fmt: skip
    return job_id
