"""`gpuctl submit/list/status/events/logs/cancel --backend kubernetes`: GPUJob resources through the API.

On Kubernetes the operator is the controller and the GPUJob's ``status`` is the job's state, so these
commands only talk to the API server (kubeconfig, ``$KUBECONFIG``, or in-cluster credentials).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.kubernetes import client, ledger
from orchestrator.backends.kubernetes.manifests import LABEL_ATTEMPT, LABEL_NODE_INDEX, check_kube_env
from orchestrator.backends.kubernetes.status_model import GpuJobStatus
from orchestrator.cli.log_files import LinePrinter, LogView, split_api_time
from orchestrator.cli.output import usd
from orchestrator.cli.status_document import kubernetes_document
from orchestrator.cli.views import print_jobs, print_status
from orchestrator.controller.admission import NO_BUDGETS, Refused, admit
from orchestrator.controller.kube_spend import KubeSpend
from orchestrator.controller.kube_zones import client_cluster, cluster_candidates
from orchestrator.controller.placement import Candidates
from orchestrator.costs.budgets import CostConfig
from orchestrator.costs.inputs import ReportInputs, read_ledger
from orchestrator.errors import GpuctlError, NotFoundError, PermanentError, UserError
from orchestrator.home import home_dir
from orchestrator.spec import JobSpec
from orchestrator.state.external_jobs import configured_database_url
from orchestrator.state.store import JobStore
from orchestrator.terminal import terminal_text
from orchestrator.times import parse_iso_or_none

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
FOLLOW_POLL_S = 2.0
"""How often ``gpuctl logs -f --backend kubernetes`` reads the pods' logs again."""
TRAINER = "trainer"
"""The container of a gpuctl pod that runs the training command (the other is the GPU monitor)."""


def default_namespace() -> str:
    return os.environ.get("GPUCTL_NAMESPACE", "default")


def gpujob_document(obj: dict[str, Any]) -> dict[str, Any]:
    """The GPUJob as the status document every backend prints (orchestrator/cli/status_document.py)."""
    return kubernetes_document(obj).as_json()


LIVE_ONLY_NOTE = (
    "spend counted from the GPUJobs that exist in namespace {namespace} only: deleted GPUJobs, other "
    "namespaces, other clusters and other backends are not seen without a ledger database (docs/kube.md)"
)


def admit_gpujob(spec: JobSpec, namespace: str, costs: CostConfig, now: datetime) -> None:
    """Refuse, before any GPUJob is created, what the operator would refuse, by its rules
    (:func:`orchestrator.controller.admission.admit`): priced by the catalog the operator uses
    (``$GPUCTL_PRICE_CATALOG`` when set, as the chart sets it for the operator), within the zones the
    cluster has (:func:`orchestrator.controller.kube_zones.client_cluster`: skipped with a note when
    this account may not list nodes or NodePools), charged to the user the operator charges (the
    namespace), with the spend :class:`~orchestrator.controller.kube_spend.KubeSpend` sums: over the
    whole ledger with a database (``GPUCTL_DATABASE_URL`` / ``database.url``), else over the GPUJobs of
    ``namespace`` (a refusal says that is all it saw)."""
    url = configured_database_url(home_dir())
    sources = KubeSpend(
        lambda: _namespace_gpujobs(namespace), None if url is None else JobStore(read_only=True)
    )
    cluster, note = client_cluster()
    if note is not None:
        print(terminal_text(f"gpuctl: note: {note}"), file=sys.stderr)
    charged = spec.model_copy(update={"user": namespace})  # the operator charges the namespace (job_spec)

    def search(s: JobSpec) -> Candidates:
        return cluster_candidates(s, cluster)

    decision = admit(
        charged,
        search,
        costs,
        lambda budget: sources.team_spent(budget, now),
        namespace,
        lambda user, limits: sources.admission_standing(user, limits, now),
    )
    if not isinstance(decision, Refused):
        return
    error = decision.error()
    spend_refused = not isinstance(admit(charged, search, costs, namespace=namespace), Refused)
    if url is None and spend_refused:  # with nothing spent it passes: the GPUJobs' spend refused it
        error = UserError(f"{error.what} ({LIVE_ONLY_NOTE.format(namespace=namespace)})", error.fix)
    raise error


def _namespace_gpujobs(namespace: str) -> list[dict[str, Any]]:
    """The GPUJobs of ``namespace``; none, with a note, when this account may not list them."""
    try:
        return client.list_gpujobs(namespace)
    except PermanentError as err:
        print(
            terminal_text(f"gpuctl: note: spend of GPUJobs taken as 0 (the operator checks it): {err.what}"),
            file=sys.stderr,
        )
        return []


def submit(
    spec: JobSpec,
    namespace: str,
    detach: bool,
    costs: CostConfig = NO_BUDGETS,
    now: datetime | None = None,
    poll_s: float = 2.0,
) -> int:
    check_kube_env(spec, f"job '{spec.name}'")  # from_env cannot reach pods
    admit_gpujob(spec, namespace, costs, now or datetime.now(UTC))
    client.create_gpujob(spec, namespace)
    name = spec.name  # the GPUJob is named after the job
    print(f"gpujob/{name} created in namespace {namespace}", flush=True)
    if detach:
        return 0
    last = None
    while True:
        doc = gpujob_document(client.get_gpujob(name, namespace))
        if doc["state"] != last:
            when = datetime.now(UTC).isoformat(timespec="seconds")
            print(terminal_text(f"{when}  {doc['state']}"), flush=True)
            last = doc["state"]
        if doc["state"] in TERMINAL_STATES:
            ended = f"cost {usd(doc['cost_usd'])} USD, attempts {doc['attempts']}, preemptions {doc['preemptions']}"
            print(terminal_text(ended))
            return 0 if doc["state"] == "SUCCEEDED" else 1
        time.sleep(poll_s)


def status(name: str, namespace: str, output: str) -> int:
    """``gpuctl status NAME --backend kubernetes``: the GPUJob's document with its findings priced
    (``avoidable``, from its ``status.gpuUsage``), as `gpuctl status` shows a local job."""
    from orchestrator.cli.document_avoidable import document_avoidable

    doc = gpujob_document(client.get_gpujob(name, namespace))
    doc["avoidable"] = document_avoidable(doc).to_dict()
    print_status(doc, output)
    return 0


def list_jobs(namespace: str, output: str) -> int:
    print_jobs([gpujob_document(obj) for obj in client.list_gpujobs(namespace)], output)
    return 0


def cost_report_inputs(namespace: str | None, since: datetime | None) -> ReportInputs:
    """``gpuctl cost report --backend kubernetes`` without a ledger database: the records of the GPUJobs
    that exist (of ``namespace``, or of every namespace this account may list), read as the job store's
    are (:func:`orchestrator.costs.inputs.read_ledger`), with the notes every format shows: deleted
    GPUJobs are missing, and so are namespaces this account may not list."""
    objs, notes = ledger.read_gpujobs(namespace)
    source = ledger.gpujob_ledger(objs, ledger.cluster_name())
    inputs = read_ledger(source, since)
    return dataclasses.replace(
        inputs, to_finish=dict(source.to_finish), notes=[ledger.DELETED_MISSING_NOTE, *notes]
    )


def _when(text: str) -> datetime:
    """The moment ``text`` names; the earliest one for damaged text (it sorts first)."""
    return parse_iso_or_none(text) or datetime.min.replace(tzinfo=UTC)


def job_events(name: str, namespace: str) -> list[dict[str, str]]:
    """The GPUJob's history, oldest first, as local jobs' (time in UTC, kind, message): its conditions (each at its last transition) and the
    core/v1 Events about it (the operator posts each state change and monitor message as one). A user
    not allowed to list Events still gets the conditions, and a note on standard error."""
    obj = client.get_gpujob(name, namespace)
    conditions = GpuJobStatus.read(obj.get("status") or {}).display.conditions or []
    found = [
        {
            "time": c.last_transition_time or "",
            "kind": f"{c.type}={c.status}",
            "message": c.message or c.reason or "",
        }
        for c in conditions
    ]
    try:
        posted = client.list_gpujob_events(name, namespace)
    except PermanentError as err:
        note = f"gpuctl: note: only the GPUJob's conditions: {err.message}"
        print(terminal_text(note, multiline=True), file=sys.stderr)
        posted = []
    for event in posted:
        kind = str(event.get("reason") or event.get("type") or "Event")
        found.append(
            {"time": client.event_time(event), "kind": kind, "message": str(event.get("message", ""))}
        )
    found.sort(key=lambda e: _when(e["time"]))
    return [{**e, "time": _when(e["time"]).isoformat(timespec="seconds")} for e in found]


@dataclass(frozen=True)
class PodChoice:
    """Which pods ``gpuctl logs`` reads: of attempt ``attempt`` (the pod's attempt label) and node
    ``node`` (the pod's name, or ``n`` and its node-index label: ``n0``); None: every one."""

    attempt: int | None = None
    node: str | None = None

    def matches(self, pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        if self.attempt is not None and labels.get(LABEL_ATTEMPT) != str(self.attempt):
            return False
        return self.node is None or self.node in (str(pod["metadata"]["name"]), _short_node(pod))


def _short_node(pod: dict[str, Any]) -> str:
    index = (pod["metadata"].get("labels") or {}).get(LABEL_NODE_INDEX)
    return f"n{index}" if index is not None else "?"


def logs(
    name: str,
    namespace: str,
    follow: bool = False,
    tail: int | None = None,
    view: LogView | None = None,
    choice: PodChoice | None = None,
) -> int:
    """The trainer output of the job's pods (of ``choice`` only), each line headed by its pod and the
    time the API server logged it (``view``: as :mod:`orchestrator.cli.log_files` shows every
    backend's lines, torchrun's signal tracebacks folded). ``follow``: keep reading, by polling,
    until the GPUJob is terminal (or deleted); a pod started again under the same name (a new
    attempt) is printed from its first line. ``tail``: each pod's last lines only, at first."""
    printed: dict[str, int] = {}  # pod uid -> lines printed
    printers: dict[str, LinePrinter] = {}
    choice = choice or PodChoice()
    try:
        while True:
            try:
                ended = gpujob_document(client.get_gpujob(name, namespace))["state"] in TERMINAL_STATES
            except NotFoundError:
                if not follow:
                    raise
                print(f"gpuctl: gpujob/{name} was deleted", file=sys.stderr)
                return 0
            listed = sorted(client.list_job_pods(name, namespace), key=lambda p: str(p["metadata"]["name"]))
            if not listed and not follow:
                raise NotFoundError(
                    f"job {name} has no pods in namespace {namespace}", "check `kubectl get gj -n NS`"
                )
            pods = [pod for pod in listed if choice.matches(pod)]
            if listed and not pods and not follow:
                _no_pod_of(choice, listed)
            for pod in pods:
                _print_new_lines(pod, namespace, printed, printers, tail, view or LogView())
            sys.stdout.flush()
            if ended or not follow:
                return 0
            time.sleep(FOLLOW_POLL_S)
    finally:
        for printer in printers.values():  # a traceback held to see how it ends
            printer.release()


def _print_new_lines(
    pod: dict[str, Any],
    namespace: str,
    printed: dict[str, int],
    printers: dict[str, LinePrinter],
    tail: int | None,
    view: LogView,
) -> None:
    pod_name = str(pod["metadata"]["name"])
    key = str(pod["metadata"].get("uid") or pod_name)
    try:
        lines = client.read_container_log(pod_name, namespace, TRAINER, timestamps=True).splitlines()
    except GpuctlError:  # not started yet (400), gone since listed (404), kubelet unreachable: next time
        return
    if key not in printed and tail is not None:
        printed[key] = max(0, len(lines) - tail)
    printer = printers.setdefault(key, LinePrinter(f"[{pod_name}] ", view, split=split_api_time))
    for line in lines[printed.get(key, 0) :]:  # the job's own output, but no escape sequence of it
        printer.show(line)
    printed[key] = len(lines)


def _no_pod_of(choice: PodChoice, listed: list[dict[str, Any]]) -> None:
    asked = " ".join(part for part in (f"--attempt {choice.attempt}" if choice.attempt is not None else "",
                                       f"--node {choice.node}" if choice.node is not None else "") if part)  # fmt: skip
    pods = ", ".join(
        f"{pod['metadata']['name']} (attempt {(pod['metadata'].get('labels') or {}).get(LABEL_ATTEMPT, '?')}, "
        f"{_short_node(pod)})"
        for pod in listed
    )
    raise NotFoundError(
        terminal_text(f"no pod of the job matches {asked}; it has: {pods}"),
        "name one of those attempts (--attempt N) and nodes (--node n0 or the pod's name); the pods of "
        "an earlier attempt are gone with their logs",
    )


def cancel(name: str, namespace: str) -> int:
    """``gpuctl cancel --backend kubernetes``: mark the GPUJob cancelled (``spec.cancel``); the
    operator's next pass cancels it through the engine (the pods get the checkpoint notice, then
    stop; state CANCELLED). The GPUJob, its status and its cost stay: `kubectl delete` removes it."""
    doc = gpujob_document(client.get_gpujob(name, namespace))
    if doc["state"] in TERMINAL_STATES:
        print(terminal_text(f"job {name} already ended ({doc['state']})"))
        return 0
    client.request_gpujob_cancel(name, namespace)
    print(terminal_text(
        f"cancel requested for gpujob/{name}: the operator stops its pods after the checkpoint notice "
        f"and marks it CANCELLED; the GPUJob and its cost stay (`kubectl delete gpujob {name} -n "
        f"{namespace}` removes it)"
    ))  # fmt: skip
    return 0
