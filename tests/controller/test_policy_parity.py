"""The controller makes the market decisions the simulator makes on the same trace, on the local backend
and on Kubernetes (the real kopf operator on orchestrator.testing's simulated cluster): one engine.

Two zones, played at 10 s a tick: zone 2 has spot for three ticks and then none; zone 1 has none until
tick 14 and then keeps it. With 9 ticks of work and a deadline of 23 ticks, gpuctl's default policy
(plan-ahead) runs spot in zone 2, goes on-demand once no zone has spot and waiting longer would leave
too little slack to ever leave on-demand again (its plan lands every launch a pass late and gives
on-demand the notice grace and a pass to stop, as the controller tells it; the simulator is told the
same), and moves to spot in zone 1 when it appears.

Locally the decisions are checked on a FakeClock: the local controller's tick (the SQL store, the local
backend's trace playback and reclaims) deciding every second, as it does, on the test kit's simulated
world (nodes start in a second and train a step a second); the simulator deciding every second gives the
same sequence, exactly. The same job then runs through ``gpuctl submit`` with real processes, in
wall-clock time, for the wiring only: how fast processes start on the machine moves a near tie
(``local_answers``: after zone 2 is lost, on-demand now or wait for zone 1 cost nearly the same), so that
run checks only what no machine speed changes: the job succeeds, starts on spot in zone 2, runs spot
only in a zone whose trace has it at that time, and ends on spot in zone 1 or on-demand.

On Kubernetes the cluster's clock is a FakeClock the test moves a tick at a time, waiting for the
operator's passes at each (no wall-clock pacing). Kubernetes does not say where spot capacity is: the
operator learns that a zone has none when its spot pods stay unschedulable (``spot_shortage_after_s``),
so it first tries zone 1, which the simulator knows is empty, and marks it short until tick 14 (the
retry time); zone 2's reclaim marks zone 2 short. Tries never get a node and cost nothing (the test
checks that); one made from on-demand would stop the on-demand run, which resumes once the try failed
(the same decision again: merged). The attempts that ran are the simulator's decisions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.backends.base import OwnPlacements
from orchestrator.backends.kubernetes.crd import GROUP, VERSION
from orchestrator.backends.kubernetes.gpujob import job_spec
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.local.market import SimulatedMarket
from orchestrator.controller.driver import Driver, run_hours
from orchestrator.policies import DEFAULT_POLICY, market_policy
from orchestrator.policies.simulator import Launch, SimJob, simulate
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.spec import JobSpec, load_spec_text, parse_deadline
from orchestrator.state.job_state import JobState
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend
from orchestrator.testing.kube_cluster import NodeShape, SimulatedKubeCluster
from orchestrator.times import iso_z as iso
from orchestrator.times import parse_iso
from tests.controller.conftest import TINY, Gpuctl, write_job
from tests.operators.kubernetes.operator_handlers import handlers

TICK_S = 10.0  # a launch on a busy 2-core machine (torchrun, torch's import) stays well under a tick
GAP_S, SPEEDUP = 300, 30  # 300 s trace ticks played 30x faster: 10 s each
ZONES = ("use1-az1", "use1-az2")
WORK_TICKS, DEADLINE_TICKS, CHANGEOVER_TICKS = 9, 23, 1
SPOT_PRICE, ON_DEMAND_PRICE = 0.5197, 3.06  # the built-in catalog's V100 prices in use1-az1
NOTICE_GRACE_S = 5


def _traces() -> np.ndarray:
    counts = np.zeros((2, 80), dtype=np.int64)
    counts[1, :3] = 1
    counts[0, 14:] = 1
    return counts


def simulated_launches(
    work_ticks: float = WORK_TICKS, changeover_ticks: int = CHANGEOVER_TICKS, pass_s: float = TICK_S
) -> list[Launch]:
    """The simulator's launches, deciding every ``pass_s`` seconds (the trace's ticks split into
    passes): 10 s, as the operator on Kubernetes decides here, or 1 s, as the local controller."""
    per_tick = round(TICK_S / pass_s)
    hours, pass_h = TICK_S / 3600, pass_s / 3600
    trace = AvailabilityTrace(ZONES, pass_h, np.repeat(_traces(), per_tick, axis=1))
    job = SimJob(
        work_ticks * hours, DEADLINE_TICKS * hours, changeover_ticks * hours, SPOT_PRICE, ON_DEMAND_PRICE
    )
    launches: list[Launch] = []
    # told, as the controller's policy is, that an action may be carried out a pass late, and that
    # on-demand may take the notice grace and a pass to stop; and given no market log, as the
    # controllers keep none (the job starts with the trace, so there is nothing before it anyway)
    stop_h = (NOTICE_GRACE_S + pass_s) / 3600
    result = simulate(
        market_policy(DEFAULT_POLICY), trace, job, np.array([0]), launches, latency_h=pass_h, stop_h=stop_h,
        market_log_h=0.0,
    )  # fmt: skip
    assert bool(result.deadline_met[0])
    return launches


def _decisions(launches: list[Launch]) -> list[tuple[str, str | None]]:
    return [(launch.market, launch.zone) for launch in launches]


def test_the_scenario_is_robust_in_the_simulator() -> None:
    expected = [("spot", "use1-az2"), ("on-demand", None), ("spot", "use1-az1")]
    assert _decisions(simulated_launches()) == expected
    # deciding every 10 s, as the operator on its FakeClock (launches there are exact): a tick or two
    # more work keeps the answer; less, or a longer changeover, leaves too little slack to come back
    for work in (WORK_TICKS + 1, WORK_TICKS + 2):
        assert _decisions(simulated_launches(work)) == expected
    # deciding every second, as the local controller does, the answer hangs on a near tie (below)
    assert local_answers() == {tuple(expected), (expected[0], expected[2])}


def local_answers() -> set[tuple[tuple[str, str | None], ...]]:
    """The simulator's answers deciding every second, as the local controller does, for work from
    two ticks less than the job's to two more, and changeovers of one and two ticks. Real start-ups
    are shorter than the changeover the policy counts (up to a tick less work left when the job is
    placed again) or, on a busy machine, longer. After zone 2 is lost the choice is a near tie: on-
    demand now (and spot in zone 1 if it comes while the slack still allows leaving) or waiting (and
    on-demand at the safety net if spot does not come) cost almost the same when spot is rarely seen
    to come back; a few seconds of slack decide it."""
    return {
        tuple(_decisions(simulated_launches(work, changeover, pass_s=1.0)))
        for work in (WORK_TICKS - 2, WORK_TICKS - 1, WORK_TICKS, WORK_TICKS + 1, WORK_TICKS + 2)
        for changeover in (1, 2)
    }


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_controller_decides_as_the_simulator(
    backend: str, gpuctl: Gpuctl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "kubernetes":
        played = asyncio.run(_play_on_kubernetes(monkeypatch))
        assert _kube_decisions(played) == _decisions(simulated_launches()), played
        return
    # the decisions: the local controller on a FakeClock, deciding every second as it does
    decided = _decide_locally_on_a_fake_clock(tmp_path / "fake")
    assert decided == _decisions(simulated_launches(pass_s=1.0)), decided
    # the wiring: the same job and traces through `gpuctl submit`, real processes in wall-clock time
    # (how fast they start moves the near tie of local_answers: only the machine-independent facts)
    files = _trace_files(tmp_path)
    step_s = 0.25
    job_file = write_job(
        tmp_path, "parity", _job_yaml(f"{TINY} {int(WORK_TICKS * TICK_S / step_s)} {step_s}")
    )
    gpuctl.run("submit", str(job_file), *files, "--trace-speedup", str(SPEEDUP), timeout=600)
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "SUCCEEDED", doc
    first_of_attempt: dict[int, dict[str, Any]] = {}
    for seg in doc["segments"]:
        first_of_attempt.setdefault(int(seg["attempt"]), seg)
    started = parse_iso(str(doc["submitted_at"]))  # the local market plays the traces from submission
    ran = [(s["market"], s["zone"] if s["market"] == "spot" else None, parse_iso(str(s["started_at"])))
           for _, s in sorted(first_of_attempt.items())]  # fmt: skip
    assert ran[0][:2] == ("spot", ZONES[1]), doc["segments"]  # the one zone with spot at the start
    for _, zone, at in ran:  # spot only where the trace has it when placed (at the tick's time)
        if zone is not None:
            assert _traces()[ZONES.index(zone), _tick_at(started, at)] >= 1, doc["segments"]
    assert len(ran) >= 2 and ran[-1][:2] in {("spot", ZONES[0]), ("on-demand", None)}, doc["segments"]


def _tick_at(start: datetime, at: datetime) -> int:
    return min(int((at - start).total_seconds() / TICK_S), int(_traces().shape[1]) - 1)


def _trace_files(folder: Path) -> list[str]:
    files = []
    for zone, row in zip(ZONES, _traces(), strict=True):
        path = folder / f"{zone}.json"
        path.write_text(json.dumps({"metadata": {"gap_seconds": GAP_S}, "data": row.tolist()}))
        files += ["--spot-trace", f"{zone}={path}"]
    return files


def _job_yaml(command: str) -> str:
    return (
        f"command: {command}\n"
        f"market: {{zones: [{', '.join(ZONES)}], changeover: {CHANGEOVER_TICKS * TICK_S:g}s}}\n"
        f"goals: {{deadline: {DEADLINE_TICKS * TICK_S:g}s, compute_hours: {WORK_TICKS * TICK_S / 3600}}}\n"
        f"checkpoint: {{notice_grace_seconds: {NOTICE_GRACE_S}}}\n"
    )


class _TraceWorld(SimulatedBackend):
    """The local backend's market on the test kit's simulated world: spot capacity as
    :class:`LocalBackend` plays the job's traces (its ``spot_capacity``), reclaims with a notice as its
    ``tick`` does, nodes that start in one round and train one step a round (no processes)."""

    name = "local"

    def __init__(self, clock: FakeClock, store: JobStore) -> None:
        super().__init__(clock)
        self.local = LocalBackend(store)

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return None  # the built-in catalog's V100 prices, as the local backend

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return self.local.spot_capacity(job_id, zone, now)

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        placement = self.local.store.attempt_placement(job_id, attempt) or {}
        capacity = self.spot_capacity(job_id, str(placement.get("zone", "")), now) if spot else None
        alive = [n for n in node_ids if n in self.nodes and not self.nodes[n].phase.ended]
        for node_id in alive[capacity:] if capacity is not None else ():
            self.nodes[node_id].notice_at = self.nodes[node_id].notice_at or now
            self.nodes[node_id].stopping = True


def _decide_locally_on_a_fake_clock(home: Path) -> list[tuple[str, str | None]]:
    """The scenario through the local controller's tick (:class:`Driver`, the SQL store) on a FakeClock
    moved a second a round: its decisions (market, zone of each attempt)."""
    home.mkdir(parents=True)
    clock = FakeClock(datetime(2026, 1, 5, tzinfo=UTC))
    store = JobStore(home / "gpuctl")
    spec = load_spec_text(f"name: parity\n{_job_yaml('train.py')}", now=clock.now())
    zone_traces = dict(f.split("=", 1) for f in _trace_files(home)[1::2])
    options = {"market": SimulatedMarket.options(speedup=SPEEDUP, zone_traces=zone_traces)}
    deadline = parse_deadline(spec.goals.deadline, clock.now()) if spec.goals.deadline else None
    job = store.create_job(name="parity", user="u", team="t", backend="local", spec_json=spec.model_dump_json(),
                           deadline=deadline, now=clock.now(), options=options)  # fmt: skip
    world = _TraceWorld(clock, store)
    world.script(job.id, SimScript(steps=int(WORK_TICKS * TICK_S)))
    driver = Driver(store, world)
    for _ in range(int(2 * DEADLINE_TICKS * TICK_S)):
        clock.advance(1.0)
        world.advance()
        driver.tick(job.id, clock.now())
        if store.job(job.id).status.terminal:
            break
    state = load_state(store, job.id)
    assert state.status is JobStatus.SUCCEEDED, state
    assert max(s.ended_at or s.started_at for s in state.segments) <= job.submitted_at + timedelta(
        seconds=DEADLINE_TICKS * TICK_S
    )
    first: dict[int, tuple[str, str | None]] = {}
    for seg in state.segments:
        where = seg.placement
        first.setdefault(seg.attempt, (str(where.market), where.zone if where.market == "spot" else None))
    return [first[a] for a in sorted(first)]


# --- the same scenario on Kubernetes: the real operator on the simulated cluster ------------------
KUBE_SHORTAGE_AFTER_S = 2.0  # a spot pod unschedulable for longer: its zone is short (under a tick)
KUBE_RETRY_AFTER_S = 13 * TICK_S  # a short zone is tried again this much later


def _kube_job(now: datetime) -> dict[str, Any]:
    spec = {
        "command": "train.py",
        "image": "example.com/train:1",
        "resources": {"gpu_types": ["V100"], "gpus_per_node": 1, "nodes": 1},
        "market": {"zones": list(ZONES), "changeover": f"{CHANGEOVER_TICKS * TICK_S:g}s"},
        "goals": {"deadline": f"{DEADLINE_TICKS * TICK_S:g}s", "compute_hours": WORK_TICKS * TICK_S / 3600},
        "checkpoint": {"notice_grace_seconds": NOTICE_GRACE_S},
    }
    meta = {"name": "parity", "namespace": "default", "uid": "uid-parity", "resourceVersion": "1"}
    meta["creationTimestamp"] = iso(now)  # the cluster's (fake) time: the deadline counts from it
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUJob", "metadata": meta, "spec": spec}


async def _play_on_kubernetes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The trace played tick by tick on the simulated cluster; the job's pods exit once its work is
    done (the time it held nodes, less a changeover per attempt, as the policy counts it). Returns
    the GPUJob's final status."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    trace = AvailabilityTrace(ZONES, TICK_S / 3600, _traces())
    shape = NodeShape(gpu_product="Tesla-V100-SXM2-16GB", gpus=1, region="us-east-1", cloud="aws")
    config = {"spot_shortage_after_s": KUBE_SHORTAGE_AFTER_S, "regrow_after_s": KUBE_RETRY_AFTER_S}
    monkeypatch.setenv("GPUCTL_OPERATOR_CONFIG", json.dumps(config))
    monkeypatch.delenv("GPUCTL_PRICE_CATALOG", raising=False)  # the built-in catalog, as the local run
    async with SimulatedKubeCluster(clock, trace, shape=shape, on_demand_nodes={ZONES[0]: 1}) as cluster:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", cluster.url)
        monkeypatch.setattr(handlers, "clock", cluster.operator_clock)
        await cluster.start_operator()
        body = _kube_job(clock.now())
        spec = job_spec("parity", "default", body["spec"])
        await cluster.create_job(body)
        await cluster.settle()
        for _ in range(2 * DEADLINE_TICKS):
            await cluster.advance(TICK_S)
            await cluster.settle()
            status = (await cluster.job("parity"))["status"]
            if JobStatus(status["state"]).terminal:
                break
            done_h = run_hours(JobState.from_status(status).segments, spec, clock.now())
            if status["state"] == "RUNNING" and done_h >= WORK_TICKS * TICK_S / 3600:
                assert await cluster.finish_pods("parity")
        status = (await cluster.job("parity"))["status"]
        assert status["state"] == "SUCCEEDED", (status, cluster.history)
        return {"status": status, "history": cluster.history, "started": cluster.started_at}


def _kube_decisions(played: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(market, zone) of each attempt that got nodes (one decision taken again after a failed try of
    spot counts once). The other attempts (spot pods that stayed unschedulable) are checked here: free,
    and in a zone the trace had no spot in at the time; and the job met its deadline."""
    segments = JobState.from_status(played["status"]).segments
    finished = max(s.ended_at or s.started_at for s in segments)
    assert finished <= played["started"] + timedelta(seconds=DEADLINE_TICKS * TICK_S), segments
    ran: dict[int, tuple[str, str | None]] = {}
    for seg in segments:
        if (seg.ended_at or seg.started_at) > seg.started_at:
            where = seg.placement
            ran.setdefault(seg.attempt, (where.market, where.zone if where.market == "spot" else None))
    traces = _traces()
    for seg in segments:
        if seg.attempt in ran:
            continue
        assert seg.placement.market == "spot" and seg.ended_at == seg.started_at, (seg, played["history"])
        tick = int((seg.started_at - played["started"]).total_seconds() / TICK_S)
        assert traces[ZONES.index(seg.placement.zone), min(tick, traces.shape[1] - 1)] == 0, (
            seg,
            played["history"],
        )
    decisions = [ran[a] for a in sorted(ran)]
    return [d for i, d in enumerate(decisions) if i == 0 or d != decisions[i - 1]]
