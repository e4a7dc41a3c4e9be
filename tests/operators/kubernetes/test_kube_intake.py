"""The operator's intake: monitors push their records, a pass folds them without reading pod logs; a job
posts for itself only; untrusted bodies are refused and harm no other job; a restart catches up from
the logs and loses nothing."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from operators.kubernetes.reconcile import reconcile_isolated
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes import intake as intake_module
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.crd import GROUP, VERSION
from orchestrator.backends.kubernetes.gpu_usage import monitor_key
from orchestrator.backends.kubernetes.intake import (
    MAX_BODY_BYTES,
    MAX_BUFFERED_LINES,
    STALE_S,
    Intake,
    IntakeServer,
    Refused,
    job_token,
)
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.manifests import MONITOR, Owner, intake_secret_name
from orchestrator.contract import PROGRESS_LINE_PREFIX, WINDOW_KIND
from orchestrator.errors import PermanentError, TemporaryError, UserError
from orchestrator.monitor import push
from orchestrator.monitor.push import Pusher, PushTarget
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import SimulatedKubeCluster

KEY = b"test-intake-key-of-32-bytes-long"
T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
ZONE = "us-central1-a"
INTAKE_URL = "http://gpuctl-intake.gpuctl.svc:8081"


def progress(step: int, at: datetime) -> str:
    return PROGRESS_LINE_PREFIX + json.dumps({"time": at.isoformat(), "step": step})


def window(end: float, util: float = 90.0) -> str:
    return json.dumps({"kind": WINDOW_KIND, "start": end - 60, "end": end, "duration_s": 60.0, "gpus": 1,
                       "model": "H100", "util_mean_pct": util, "util_p95_pct": util, "util_max_pct": util,
                       "mem_used_max_bytes": 1 << 30, "mem_total_bytes": 80 << 30, "idle_seconds": 0.0})  # fmt: skip


def body(job_uid: str, lines: list[Any], pod: str = "p-n0", pod_uid: str = "u0") -> bytes:
    return json.dumps({"jobUid": job_uid, "pod": pod, "podUid": pod_uid, "lines": lines}).encode()


def bearer(job_uid: str) -> str:
    return f"Bearer {job_token(KEY, job_uid)}"


# --- the intake on its own ------------------------------------------------------------------------
def test_a_job_posts_for_itself_only() -> None:
    intake = Intake(KEY)
    line = progress(1, T0)
    assert intake.accept(bearer("uid-a"), body("uid-a", [line])) == 1
    with pytest.raises(Refused) as other:  # job a's token, job b's uid: refused, nothing kept for b
        intake.accept(bearer("uid-a"), body("uid-b", [line]))
    assert other.value.status == 403
    for token in (None, "", "Bearer ", f"Bearer {job_token(b'another-operator-key-0000', 'uid-b')}"):
        with pytest.raises(Refused):
            intake.accept(token, body("uid-b", [line]))
    assert intake.drain("uid-b") == {}
    (feed,) = intake.drain("uid-a").values()
    assert feed.lines == [PROGRESS_LINE_PREFIX + json.dumps({"time": T0.isoformat(), "step": 1},
                                                            separators=(",", ":"))]  # fmt: skip
    assert intake.drain("uid-a") == {}  # taken once


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"x" * (MAX_BODY_BYTES + 1), 413),
        (b'{"jobUid": "uid-a", "pod": "p", "podUid": "u", "lines": [NaN]}', 400),
        (b'{"jobUid": "uid-a", "pod": "p", "podUid": "u", "lines": [], "x": Infinity}', 400),
        (b"[1, 2]", 400),
        (b"not json", 400),
        (b"\xff\xfe", 400),
        (b"[" * 100_000 + b"]" * 100_000, 400),
        (body("uid-a", "one line"), 400),  # type: ignore[arg-type]
        (body("uid-a", [1, 2]), 400),
        (body("uid-a", ["x" * 20_000]), 400),
        (body("uid-a", ["{}"] * 10_000), 400),
        (json.dumps({"jobUid": 7, "pod": "p", "podUid": "u", "lines": []}).encode(), 400),
        (body("uid-a", [], pod="../p"), 400),
        (body("uid-a", [], pod_uid=""), 400),
    ],
)
def test_untrusted_bodies_are_refused_without_touching_other_jobs(raw: bytes, status: int) -> None:
    intake = Intake(KEY)
    intake.accept(bearer("uid-b"), body("uid-b", [progress(3, T0)]))
    with pytest.raises(Refused) as refused:
        intake.accept(bearer("uid-a"), raw)
    assert refused.value.status == status
    assert intake.drain("uid-a") == {}
    (feed,) = intake.drain("uid-b").values()
    assert len(feed.lines) == 1


def test_invalid_records_are_skipped_and_valid_ones_kept() -> None:
    intake = Intake(KEY)
    lines = [
        progress(1, T0),
        PROGRESS_LINE_PREFIX + '{"time": "2026-11-02T12:00:00+00:00", "step": 1e400}',  # not finite
        PROGRESS_LINE_PREFIX + '{"time": "2026-11-02T12:00:00+00:00", "step": "ten"}',  # wrong type
        PROGRESS_LINE_PREFIX + '{"time": "2026-11-02T12:00:00+00:00", "step": 1}{"step": 2}',
        window(T0.timestamp()),
        window(T0.timestamp(), util=500.0),  # out of range
        json.dumps({"kind": "gpuctl.monitor.unavailable", "reason": "no_nvml", "message": 7}),
        json.dumps({"kind": "something else"}),
        "gpuctl monitor: serving /metrics",
    ]
    assert intake.accept(bearer("uid-a"), body("uid-a", lines)) == 3
    (feed,) = intake.drain("uid-a").values()
    assert [json.loads(x.removeprefix(PROGRESS_LINE_PREFIX)).get("kind") for x in feed.lines] == [
        None,
        WINDOW_KIND,
        "gpuctl.monitor.unavailable",
    ]


def test_a_flood_keeps_the_newest_lines_and_asks_for_a_log_read() -> None:
    intake = Intake(KEY)
    for start in range(0, MAX_BUFFERED_LINES + 256, 256):
        lines = [progress(s, T0) for s in range(start, start + 256)]
        intake.accept(bearer("uid-a"), body("uid-a", lines))
    (feed,) = intake.drain("uid-a").values()
    assert feed.overflowed and len(feed.lines) == MAX_BUFFERED_LINES
    assert intake.needs_read("uid-a", "p-n0/u0", feed, T0)


def test_the_monitor_push_client_against_the_server() -> None:
    """orchestrator/monitor/push.py against the real server: posts, heartbeats, a refusal dropped."""
    server = IntakeServer(Intake(KEY), 0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}"
        env = {push.ENV_INTAKE_URL: url, push.ENV_INTAKE_TOKEN: job_token(KEY, "uid-a"),
               push.ENV_JOB_UID: "uid-a", push.ENV_POD_NAME: "p-n0", push.ENV_POD_UID: "u0"}  # fmt: skip
        target = PushTarget.from_env(env)
        assert target is not None and PushTarget.from_env({**env, push.ENV_INTAKE_TOKEN: ""}) is None
        pusher = Pusher(target)
        for step in range(300):  # more than one post holds
            pusher.add(progress(step, T0) + "\n")
        assert pusher.send() and not pusher.queue
        (feed,) = server.intake.drain("uid-a").values()
        assert len(feed.lines) == 300
        assert pusher.send() and not pusher.due()  # nothing new, heartbeat sent recently
        liar = Pusher(PushTarget(target.url, target.token, "uid-b", "p-n0", "u0"))
        liar.add(progress(1, T0))
        assert liar.send() and not liar.queue  # refused (403): dropped, the log keeps it
        assert server.intake.refused == 1 and server.intake.drain("uid-b") == {}
        gone = Pusher(PushTarget("http://127.0.0.1:1/v1/monitor-records", "t", "uid-a", "p", "u"))
        gone.add(progress(1, T0))
        assert not gone.send() and len(gone.queue) == 1  # kept for the next try
    finally:
        server.close()


# --- passes on the simulated cluster --------------------------------------------------------------
@pytest.fixture
def no_intake() -> Iterator[None]:
    intake_module.activate(None)
    yield
    intake_module.activate(None)


@pytest_asyncio.fixture
async def cluster(no_intake: None) -> AsyncIterator[SimulatedKubeCluster]:
    async with SimulatedKubeCluster(FakeClock(T0), on_demand_nodes={ZONE: 1}) as sim:
        yield sim


def gpujob(name: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": T0.isoformat()},
        "spec": {
            "command": "train.py",
            "image": "example.com/train:1",
            "resources": {"gpu_types": ["H100"], "gpus_per_node": 1, "nodes": nodes},
            "market": {"mode": "on-demand"},
        },
    }


class Job:
    """One running GPUJob, its passes run here (what kopf's timer calls), and its pods' monitors."""

    def __init__(
        self,
        cluster: SimulatedKubeCluster,
        name: str,
        server: IntakeServer | None,
        view: ClusterView | None = None,
    ) -> None:
        self.cluster, self.name, self.server, self.view = cluster, name, server, view
        self.config = KubeConfig(intake_url=INTAKE_URL)
        self.api = client.api_client_for(cluster.url)
        self.pods: list[dict[str, Any]] = []

    async def start(self, nodes: int) -> None:
        await self.cluster.create_job(gpujob(self.name, nodes))
        await self.run_pass()
        await self.cluster.schedule()
        await self.run_pass()
        self.pods = await self.cluster.pods()
        assert (await self.status())["state"] == "RUNNING"

    async def run_pass(self, body: dict[str, Any] | None = None) -> None:
        """One pass; ``body``: the GPUJob as kopf's watch would give it."""
        now = self.cluster.clock.now()
        await asyncio.to_thread(
            reconcile_isolated, self.name, "default", self.config, now, self.api, self.view, body
        )

    async def status(self) -> dict[str, Any]:
        return dict((await self.cluster.job(self.name)).get("status") or {})

    def log(self, *lines: str) -> None:
        """Each pod's monitor prints ``lines`` (its container log)."""
        for pod in self.pods:
            for line in lines:
                self.cluster.logs.write("default", pod["metadata"]["name"], MONITOR, line)

    def push(self, *lines: str, key: bytes = KEY) -> None:
        """Each pod's monitor prints ``lines`` and pushes them, as the sidecar does."""
        self.log(*lines)
        assert self.server is not None
        for pod in self.pods:
            name, pod_uid = monitor_key(pod).split("/", 1)
            uid = f"uid-{self.name}"
            target = PushTarget(f"http://127.0.0.1:{self.server.port}{push.INTAKE_PATH}",
                                job_token(key, uid), uid, name, pod_uid)  # fmt: skip
            pusher = Pusher(target)
            for line in lines:
                pusher.add(line)
            assert pusher.send()

    def log_reads(self) -> int:
        return self.cluster.requests()["GET pods/log"]


def serve() -> IntakeServer:
    server = IntakeServer(Intake(KEY), 0, "127.0.0.1")
    intake_module.activate(server.intake)
    return server


@pytest.mark.asyncio
async def test_pushed_records_reach_the_status_without_log_reads(cluster: SimulatedKubeCluster) -> None:
    server = serve()
    try:
        job = Job(cluster, "a", server)
        await job.start(2)
        # the token: in a Secret owned by the GPUJob, given to the monitor container only
        secret = await cluster.call(cluster.core.read_namespaced_secret, intake_secret_name("a"), "default")
        assert secret.string_data["token"] == job_token(KEY, "uid-a")
        assert secret.metadata.owner_references[0].uid == "uid-a"
        (pod, _) = job.pods
        monitor = next(c for c in pod["spec"]["initContainers"] if c["name"] == MONITOR)
        env = {e["name"]: e for e in monitor["env"]}
        assert env[push.ENV_INTAKE_URL]["value"] == INTAKE_URL and env[push.ENV_JOB_UID]["value"] == "uid-a"
        assert env[push.ENV_INTAKE_TOKEN]["valueFrom"]["secretKeyRef"]["name"] == intake_secret_name("a")
        trainer = pod["spec"]["containers"][0]
        assert not [e for e in trainer["env"] if e["name"].startswith("GPUCTL_INTAKE")]
        # first pushes: the monitors' logs are read once (the catch-up), then never again
        await cluster.advance(10)
        job.push(progress(5, cluster.clock.now()))
        await job.run_pass()
        assert (await job.status())["progress"]["step"] == 5
        reads = job.log_reads()
        for step in (6, 7, 8):
            await cluster.advance(10)
            end = cluster.clock.now().timestamp()
            job.push(progress(step, cluster.clock.now()), window(end))
            await job.run_pass()
            status = await job.status()
            assert status["progress"]["step"] == step
            assert status["gpuUsageTotals"]["windows"] == 2 * (step - 5)  # one per pod, each once
        assert job.log_reads() == reads
        # a pass with nothing new writes nothing
        patches = cluster.requests()["PATCH gpujobs/status"]
        await job.run_pass()
        assert cluster.requests()["PATCH gpujobs/status"] == patches
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_steady_pass_costs_one_request(cluster: SimulatedKubeCluster) -> None:
    """Passes as the operator runs them: given the GPUJob as kopf's watch has it, sharing the pod and
    node listings. A steady pass makes one request, its status patch (none when nothing is new); the
    pods, the nodes and the Karpenter NodePools are one LIST each per round of passes; a copy of the GPUJob older than the
    status the operator wrote is read again."""
    server, view = serve(), ClusterView()
    try:
        jobs = [Job(cluster, name, server, view) for name in ("a", "b", "c")]
        for job in jobs:
            await job.start(1)
        pods = await cluster.pods()
        for job in jobs:
            job.pods = [p for p in pods if p["metadata"]["labels"]["gpuctl.dev/job"] == job.name]
            job.push(progress(1, cluster.clock.now()))
            await job.run_pass()  # the catch-up: each monitor's log read once
        old = {str(j["metadata"]["name"]): j for j in await cluster.jobs()}
        for step, seconds in ((2, 10), (2, 0), (3, 10)):  # a round with nothing new patches nothing
            await cluster.advance(seconds)
            for job in jobs:
                if seconds:
                    job.push(progress(step, cluster.clock.now()))
            watched = {str(j["metadata"]["name"]): j for j in await cluster.jobs()}  # kopf's watch
            before = cluster.requests()
            for job in jobs:
                await job.run_pass(watched[job.name])
            spent = cluster.requests() - before
            patches = 3 if seconds else 0  # the clock moved: cost and zone history move
            assert spent == {
                "LIST pods": 1,
                "LIST nodes": 1,
                "LIST nodepools": 1,
                **({"PATCH gpujobs/status": 3} if patches else {}),
            }
        assert [(await job.status())["progress"]["step"] for job in jobs] == [3, 3, 3]
        before = cluster.requests()
        await jobs[0].run_pass(old["a"])  # the watch is behind: read again
        assert (cluster.requests() - before)["GET gpujobs"] == 1
        assert (await jobs[0].status())["progress"]["step"] == 3
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_monitor_that_stops_pushing_is_read_again(cluster: SimulatedKubeCluster) -> None:
    server = serve()
    try:
        job = Job(cluster, "s", server)
        await job.start(1)
        job.push(progress(1, cluster.clock.now()))
        await job.run_pass()
        reads = job.log_reads()
        await cluster.advance(STALE_S - 1)
        job.log(progress(2, cluster.clock.now()))  # printed, not pushed (the intake is unreachable)
        await job.run_pass()
        assert job.log_reads() == reads and (await job.status())["progress"]["step"] == 1
        await cluster.advance(2)
        await job.run_pass()
        assert job.log_reads() == reads + 1 and (await job.status())["progress"]["step"] == 2
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_post_with_another_jobs_token_changes_nothing(cluster: SimulatedKubeCluster) -> None:
    server = serve()
    try:
        a, b = Job(cluster, "a", server), Job(cluster, "b", server)
        await a.start(1)
        await b.start(1)
        b.pods = [p for p in await cluster.pods() if p["metadata"]["labels"]["gpuctl.dev/job"] == "b"]
        a.pods = [p for p in await cluster.pods() if p["metadata"]["labels"]["gpuctl.dev/job"] == "a"]
        a.push(progress(1, cluster.clock.now()))
        b.push(progress(1, cluster.clock.now()))
        await a.run_pass()
        await b.run_pass()
        # job a posts as job b: with a's token refused; under b's uid with a's pod, dropped at the fold
        await cluster.advance(10)
        forged = body("uid-b", [progress(99, cluster.clock.now())], *monitor_key(a.pods[0]).split("/", 1))
        with pytest.raises(Refused):
            server.intake.accept(bearer("uid-a"), forged)
        server.intake.accept(bearer("uid-b"), forged)  # b's own token, a pod that is not b's
        await b.run_pass()
        assert (await b.status())["progress"]["step"] == 1
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_restarted_operator_catches_up_from_the_logs(cluster: SimulatedKubeCluster) -> None:
    server = serve()
    try:
        job = Job(cluster, "r", server)
        await job.start(2)
        await cluster.advance(60)
        job.push(progress(1, cluster.clock.now()), window(cluster.clock.now().timestamp()))
        await job.run_pass()
        # posted to the old process but not folded yet, then the operator stops
        await cluster.advance(60)
        job.push(progress(2, cluster.clock.now()), window(cluster.clock.now().timestamp()))
    finally:
        server.close()
    # while it is down, the monitors print (their pushes fail)
    await cluster.advance(60)
    job.log(progress(3, cluster.clock.now()), window(cluster.clock.now().timestamp()))
    server = job.server = serve()  # a new process: nothing in memory
    try:
        # the monitors' first push to it comes before its first pass: their logs are read all the same
        await cluster.advance(60)
        job.push(progress(4, cluster.clock.now()), window(cluster.clock.now().timestamp()))
        reads = job.log_reads()
        await job.run_pass()
        assert job.log_reads() == reads + 2  # one read per monitor
        status = await job.status()
        assert status["progress"]["step"] == 4
        assert status["gpuUsageTotals"]["windows"] == 8  # 4 windows x 2 monitors, none lost, none twice
        assert math.isclose(status["gpuUsage"]["util_mean_pct"], 90.0)
        await cluster.advance(10)  # pushing from now on; a window sent again counts once
        job.push(window(cluster.clock.now().timestamp() - 10), progress(5, cluster.clock.now()))
        await job.run_pass()
        status = await job.status()
        assert status["progress"]["step"] == 5 and status["gpuUsageTotals"]["windows"] == 8
        assert job.log_reads() == reads + 2
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_restarted_operator_with_an_unreadable_log_folds_nothing_out_of_order(
    cluster: SimulatedKubeCluster,
) -> None:
    """The catch-up read fails: the pushed lines wait (folding them first would skip the older windows
    only the log has), and are folded after the log once it can be read."""
    job = Job(cluster, "u", serve())
    try:
        await job.start(1)
        await cluster.advance(60)
        job.log(window(cluster.clock.now().timestamp()))  # printed while no operator listened
    finally:
        assert job.server is not None
        job.server.close()
    server = job.server = serve()
    try:
        intake_module.activate(server.intake)
        await cluster.advance(60)
        job.push(window(cluster.clock.now().timestamp()))
        (pod,) = job.pods
        cluster.logs.failing.add(pod["metadata"]["name"])
        await job.run_pass()
        assert "gpuUsageTotals" not in await job.status()
        cluster.logs.failing.clear()
        await job.run_pass()
        assert (await job.status())["gpuUsageTotals"]["windows"] == 2
    finally:
        server.close()


@pytest.mark.asyncio
async def test_without_an_intake_every_pass_reads_the_logs(cluster: SimulatedKubeCluster) -> None:
    job = Job(cluster, "l", None)
    job.config = KubeConfig()
    await job.start(2)
    monitor = next(c for c in job.pods[0]["spec"]["initContainers"] if c["name"] == MONITOR)
    assert not [e for e in monitor["env"] if e["name"].startswith("GPUCTL_INTAKE")]
    reads = job.log_reads()
    job.log(progress(1, cluster.clock.now()))
    await job.run_pass()
    assert job.log_reads() == reads + 2 and (await job.status())["progress"]["step"] == 1


def test_the_operator_serves_the_intake_from_its_environment(
    monkeypatch: pytest.MonkeyPatch, no_intake: None
) -> None:
    monkeypatch.delenv(intake_module.ENV_PORT, raising=False)
    assert intake_module.serve_from_env() is None and intake_module.active() is None
    monkeypatch.setenv(intake_module.ENV_PORT, "0")
    monkeypatch.setenv(intake_module.ENV_KEY, "short")
    with pytest.raises(UserError, match="at least 16 bytes"):
        intake_module.serve_from_env()
    monkeypatch.setenv(intake_module.ENV_KEY, KEY.decode())
    first = intake_module.serve_from_env()
    second = intake_module.serve_from_env()  # started again: a fresh intake, the old one closed
    assert first is not None and second is not None
    try:
        assert intake_module.active() is second.intake and second.intake is not first.intake
        pusher = Pusher(PushTarget(f"http://127.0.0.1:{second.port}{push.INTAKE_PATH}",
                                   job_token(KEY, "uid-a"), "uid-a", "p", "u"))  # fmt: skip
        pusher.add(progress(1, T0))
        assert pusher.send() and second.intake.posts == 1
    finally:
        second.close()


def test_a_token_secret_that_may_not_be_created_is_tried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """RBAC without Secrets: one try per GPUJob and process (its monitors cannot push; their logs are
    read); an API server too busy to answer is asked again on the next pass."""
    calls: list[str] = []
    answers: list[Exception | None] = [TemporaryError("busy", "retry"), PermanentError("forbidden")]

    def create_secret(secret: dict[str, Any], api: Any) -> None:
        calls.append(secret["metadata"]["name"])
        answer = answers.pop(0) if answers else None
        if answer is not None:
            raise answer

    monkeypatch.setattr(client, "create_secret", create_secret)
    intake = Intake(KEY)
    owner = Owner("a", "uid-a")
    for _ in range(4):
        intake.ensure_token_secret(owner, "default", None)
    assert calls == [intake_secret_name("a")] * 2
    intake.ensure_token_secret(Owner("b", "uid-b"), "default", None)
    assert calls[-1] == intake_secret_name("b")


@pytest.mark.asyncio
async def test_records_taken_by_a_pass_that_failed_are_written_by_the_next(
    cluster: SimulatedKubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass takes the pushed records, then its status patch fails (the API server busy): the next
    pass writes them, without a log read, and a third counts nothing twice."""
    server = serve()
    try:
        job = Job(cluster, "f", server)
        await job.start(2)
        await cluster.advance(60)
        job.push(progress(1, cluster.clock.now()), window(cluster.clock.now().timestamp()))
        await job.run_pass()  # the catch-up read; pushing from now on
        reads = job.log_reads()
        await cluster.advance(60)
        job.push(progress(2, cluster.clock.now()), window(cluster.clock.now().timestamp()))

        def busy(*_: Any, **__: Any) -> None:
            raise TemporaryError("cannot patch: API server busy (503)", "retry later")

        with monkeypatch.context() as patched:
            patched.setattr(client, "patch_gpujob_status", busy)
            with pytest.raises(TemporaryError):
                await job.run_pass()
        await job.run_pass()
        status = await job.status()
        assert status["progress"]["step"] == 2 and status["gpuUsageTotals"]["windows"] == 4
        await job.run_pass()
        assert (await job.status())["gpuUsageTotals"]["windows"] == 4
        assert job.log_reads() == reads
    finally:
        server.close()


def test_a_job_without_passes_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deleted GPUJob's records and what the intake knew of its monitors go after FORGET_S."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    intake = Intake(KEY)
    intake.accept(bearer("uid-a"), body("uid-a", [progress(1, T0)]))
    (feed,) = intake.drain("uid-a").values()
    intake.took("uid-a", "p-n0/u0", pushed=True, now=T0)
    intake.hand("uid-a", "p-n0/u0", feed.lines)
    intake.accept(bearer("uid-a"), body("uid-a", [progress(2, T0)]))  # posted, never taken
    assert not intake.needs_read("uid-a", "p-n0/u0", None, T0)
    clock[0] += intake_module.FORGET_S + 1
    intake.drain("uid-b")  # another job's pass sweeps
    assert intake.needs_read("uid-a", "p-n0/u0", None, T0)  # a new start for it: the log is read
    assert intake.unwritten("uid-a", {}) == {} and intake.drain("uid-a") == {}
