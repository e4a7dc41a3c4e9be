"""The operator's intake: monitor sidecars push their window summaries and progress lines here, so a
pass needs no log read per pod (the pull it replaces: :func:`orchestrator.backends.kubernetes.gpu_usage.read_monitor_logs`).

**Serving.** With ``GPUCTL_INTAKE_PORT`` and ``GPUCTL_INTAKE_KEY`` set (the Helm chart sets both), the
operator serves ``POST`` :data:`~orchestrator.monitor.push.INTAKE_PATH` (stdlib HTTP server, a thread
per request). The body is the monitor's JSON object (:mod:`orchestrator.monitor.push`).

**Who may post.** Each GPUJob has its own token: HMAC-SHA256 of the operator's key and the GPUJob's uid
(:func:`job_token`). The operator writes it into a Secret of the job's namespace, owned by the GPUJob
(:func:`ensure_token_secret`, once per GPUJob and operator process), from which the pod's monitor
container alone gets it; the trainer container does not. A post names its GPUJob uid, and is taken
only with that uid's token, so a job can post for itself, never for another; the operator needs no API
request to check a token. (A shared token would let any job write another's progress; a token in the
pod spec itself would give it to whoever may read pods.) A post for a pod the GPUJob does not own is
dropped when it is folded (only the GPUJob's listed pods are monitors).

**What is taken.** Records are untrusted: a body over :data:`MAX_BODY_BYTES`, not a JSON object, with
a non-finite number or fields of the wrong type is refused whole (HTTP 4xx); each line is then parsed
by the contract (:func:`~orchestrator.contract.parse_progress_records`,
:func:`~orchestrator.contract.window_summary`) and an invalid one skipped. What is taken waits in memory
(at most :data:`MAX_BUFFERED_LINES` per monitor, the oldest dropped and a log read asked for then) and
is folded into the GPUJob's status by the job's next pass (:func:`monitor_texts`), through the same
code as a log (:class:`~orchestrator.backends.kubernetes.gpu_usage.MonitorLedger`,
:func:`~orchestrator.backends.kubernetes.progress.with_progress`).

**Nothing lost.** A monitor's log is still read while it has not pushed to this operator process: on
its first pass after an operator restart (the catch-up: the log from the last window taken), and after
:data:`STALE_S` without a post (a monitor that cannot reach the intake); both reads go back to the
last window in the status, and lines read twice count once (windows by their end, progress by time).
Lines handed to a pass are handed to the next ones too until the GPUJob's status shows them
(:meth:`Intake.unwritten`): a pass that fails after taking them (its status patch refused) loses nothing.
The operator runs as one replica (the chart's Deployment); each replica would keep its own intake.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.gpu_usage import (
    LOGGED_PHASES,
    MonitorLedger,
    monitor_key,
    read_monitor_logs,
)
from orchestrator.backends.kubernetes.manifests import Owner, build_intake_secret
from orchestrator.backends.kubernetes.progress import record_time
from orchestrator.contract import (
    PROGRESS_LINE_PREFIX,
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    BadRecord,
    monitor_unavailable,
    parse_progress_records,
    summary_record,
    window_summary,
)
from orchestrator.errors import GpuctlError, TemporaryError, UserError
from orchestrator.monitor.push import INTAKE_PATH, MAX_LINE_CHARS, MAX_LINES_PER_POST

log = logging.getLogger(__name__)

ENV_PORT = "GPUCTL_INTAKE_PORT"
ENV_KEY = "GPUCTL_INTAKE_KEY"
MIN_KEY_BYTES = 16
MAX_BODY_BYTES = 1 << 20
MAX_NAME_CHARS = 253
MAX_BUFFERED_LINES = 4096
"""Lines kept per monitor between two passes; beyond, the oldest go and the next pass reads the log."""
MAX_MONITORS_PER_JOB = 1024
STALE_S = 180.0
"""A pushing monitor silent this long (three of its heartbeats) has its log read again, each pass,
until it pushes again."""
FORGET_S = 900.0
"""A job whose records no pass took this long (deleted, or of another operator) is forgotten."""
SWEEP_S = 60.0
REQUEST_TIMEOUT_S = 10.0


class Refused(ValueError):
    """A post the intake does not take; ``status`` is the HTTP status it is answered with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def job_token(key: bytes, job_uid: str) -> str:
    """The token of the GPUJob ``job_uid``: what its monitors must present."""
    return hmac.new(key, f"gpuctl-intake:{job_uid}".encode(), hashlib.sha256).hexdigest()


@dataclass
class Feed:
    """One monitor's lines pushed since the last pass, oldest first."""

    lines: list[str] = field(default_factory=list)
    overflowed: bool = False
    """Lines were dropped (the pass reads the log)."""


@dataclass
class _Job:
    monitors: dict[str, Feed] = field(default_factory=dict)
    touched: float = field(default_factory=time.monotonic)


class Intake:
    """The pushed records of every GPUJob, until their passes take them; thread-safe."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the intake key must be at least {MIN_KEY_BYTES} bytes")
        self.key = key
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._contact: dict[str, dict[str, datetime]] = {}
        """Job uid -> monitor -> the pass that last took a post of it or read its log."""
        self._pushing: set[tuple[str, str]] = set()
        """Monitors that pushed to this process and were not silent for STALE_S since."""
        self._secrets: set[str] = set()
        self._handed: dict[str, dict[str, list[str]]] = {}
        """Job uid -> monitor -> lines (pushed, or read from its log) handed to a pass that may not
        have written them yet."""
        self._passed: dict[str, float] = {}
        """Job uid -> when (monotonic) its last pass took its records: jobs without one for FORGET_S
        (deleted, or ended) are forgotten."""
        self._swept = -math.inf
        self.posts = 0
        self.refused = 0
        self.cpu_s = 0.0
        """CPU time the intake's request threads spent (for the benchmark and metrics)."""

    # --- posts ------------------------------------------------------------------------------------
    def accept(self, authorization: str | None, body: bytes) -> int:
        """Take one post; returns how many lines were kept. Raises :class:`Refused`."""
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, f"body over {MAX_BODY_BYTES} bytes")
        data = _body(body)
        job_uid, pod, pod_uid = (_name(data, k) for k in ("jobUid", "pod", "podUid"))
        token = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(token.encode(), job_token(self.key, job_uid).encode()):
            raise Refused(403, "bad token for this GPUJob")
        lines = data.get("lines")
        if not isinstance(lines, list) or len(lines) > MAX_LINES_PER_POST:
            raise Refused(400, f"lines must be a list of at most {MAX_LINES_PER_POST} strings")
        if not all(isinstance(line, str) and len(line) <= MAX_LINE_CHARS for line in lines):
            raise Refused(400, f"lines must be strings of at most {MAX_LINE_CHARS} characters")
        kept = [k for line in lines if (k := valid_line(line)) is not None]
        self._buffer(job_uid, f"{pod}/{pod_uid}", kept)
        return len(kept)

    def _buffer(self, job_uid: str, monitor: str, lines: list[str]) -> None:
        with self._lock:
            job = self._jobs.setdefault(job_uid, _Job())
            job.touched = time.monotonic()
            feed = job.monitors.get(monitor)
            if feed is None:
                if len(job.monitors) >= MAX_MONITORS_PER_JOB:
                    raise Refused(429, f"more than {MAX_MONITORS_PER_JOB} monitors for one GPUJob")
                feed = job.monitors[monitor] = Feed()
            feed.lines.extend(lines)
            if len(feed.lines) > MAX_BUFFERED_LINES:
                del feed.lines[: len(feed.lines) - MAX_BUFFERED_LINES]
                feed.overflowed = True

    # --- passes -----------------------------------------------------------------------------------
    def drain(self, job_uid: str) -> dict[str, Feed]:
        """The feeds of one GPUJob since its last pass (each monitor that posted, heartbeats too)."""
        with self._lock:
            job = self._jobs.pop(job_uid, None)
            self._passed[job_uid] = now = time.monotonic()
            if now - self._swept > SWEEP_S:  # at most once a minute: a sweep looks at every job
                self._swept = now
                for uid in [u for u, j in self._jobs.items() if j.touched < now - FORGET_S]:
                    del self._jobs[uid]
                for uid in [u for u, at in self._passed.items() if at < now - FORGET_S]:
                    self._forget(uid)
        return job.monitors if job is not None else {}

    def _forget(self, job_uid: str) -> None:
        del self._passed[job_uid]
        self._handed.pop(job_uid, None)
        self._secrets.discard(job_uid)
        for monitor in self._contact.pop(job_uid, {}):
            self._pushing.discard((job_uid, monitor))

    def requeue(self, job_uid: str, monitor: str, feed: Feed) -> None:
        """Put back a feed the pass could not fold (its monitor's log, needed first, was not read)."""
        with self._lock:
            job = self._jobs.setdefault(job_uid, _Job())
            newer = job.monitors.get(monitor)
            if newer is not None:
                feed.lines.extend(newer.lines)
                feed.overflowed |= newer.overflowed
            job.monitors[monitor] = feed

    def needs_read(self, job_uid: str, monitor: str, feed: Feed | None, now: datetime) -> bool:
        """Whether this pass reads the monitor's log: nothing of it was taken by this process yet
        (the catch-up after a start: one read), its pushed lines overflowed, or it does not push (a
        monitor without a token, or one silent for :data:`STALE_S`: read each pass, as without an
        intake, until it pushes again)."""
        key = (job_uid, monitor)
        if feed is not None:
            return feed.overflowed or monitor not in self._contact.get(job_uid, {})
        contact = self._contact.get(job_uid, {}).get(monitor)
        if key in self._pushing and contact is not None and (now - contact).total_seconds() > STALE_S:
            self._pushing.discard(key)
        return key not in self._pushing

    def took(self, job_uid: str, monitor: str, pushed: bool, now: datetime) -> None:
        """The pass folded this monitor's records (pushed, or read from its log)."""
        self._contact.setdefault(job_uid, {})[monitor] = now
        if pushed:
            self._pushing.add((job_uid, monitor))

    def unwritten(self, job_uid: str, status: Mapping[str, Any]) -> dict[str, list[str]]:
        """The lines handed to earlier passes that the GPUJob's status does not show yet (a pass that
        failed after taking them: its status patch never came): handed again, else they were lost."""
        handed = self._handed.pop(job_uid, {})
        if not handed:
            return {}
        last_ends = MonitorLedger.from_status(status).last_ends
        progress = status.get("progress")
        seen = record_time(progress) if isinstance(progress, Mapping) else None
        kept = {m: [x for x in lines if _unwritten(x, last_ends.get(m), seen)] for m, lines in handed.items()}
        return {m: lines for m, lines in kept.items() if lines}

    def hand(self, job_uid: str, monitor: str, lines: list[str]) -> None:
        """Lines handed to this pass, kept until a status shows them (:meth:`unwritten`)."""
        if lines:
            self._handed.setdefault(job_uid, {})[monitor] = lines[-MAX_BUFFERED_LINES:]

    def keep_only(self, job_uid: str, monitors: set[str]) -> None:
        """Forget the monitors of a GPUJob whose pods are gone."""
        seen = self._contact.get(job_uid, {})
        for monitor in [m for m in seen if m not in monitors]:
            del seen[monitor]
            self._pushing.discard((job_uid, monitor))
        if not seen:
            self._contact.pop(job_uid, None)

    def ensure_token_secret(self, owner: Owner, namespace: str, api: Any) -> None:
        """Create the GPUJob's token Secret, once per GPUJob and process (an existing one is kept). One
        that may not be created is logged once: the job's monitors then cannot push, and their logs are
        read each pass; an API server too busy to answer is asked again on the next pass."""
        if owner.uid in self._secrets:
            return
        secret = build_intake_secret(owner, namespace, job_token(self.key, owner.uid))
        try:
            client.create_secret(secret, api)
        except TemporaryError:
            return  # the API server is busy: the next pass tries again
        except GpuctlError as err:
            if "already exists" not in err.what:  # not allowed, say: not tried again by this process
                log.warning("GPUJob %s/%s: intake token not stored: %s", namespace, owner.name, err.message)
        self._secrets.add(owner.uid)


def _unwritten(line: str, last_end: float | None, seen: datetime | None) -> bool:
    """Whether a status whose monitor's last window ends at ``last_end`` and whose progress is of
    ``seen`` lacks what ``line`` (a line :func:`valid_line` kept) would write: a newer window, or a newer
    step or ``finished`` record (other records change no status, or only with a newer one)."""
    record = summary_record(line.removeprefix(PROGRESS_LINE_PREFIX))
    if record is None:
        return False
    if line.startswith(PROGRESS_LINE_PREFIX):
        if record.get("event") not in (None, "finished"):
            return False
        at = record_time(record)
        return at is not None and (seen is None or at > seen)
    if record.get("kind") != WINDOW_KIND:
        return False
    end = record.get("end")
    return isinstance(end, int | float) and (last_end is None or end > last_end)


def valid_line(line: str) -> str | None:
    """The line as the contract reads it (strict JSON of a valid record); None for one to skip."""
    text = line.strip()
    prefix = PROGRESS_LINE_PREFIX.strip()
    if text.startswith(prefix):
        records = parse_progress_records(text.removeprefix(prefix), "pushed progress lines")
        if len(records) != 1:
            return None
        return PROGRESS_LINE_PREFIX + json.dumps(dict(records[0].fields), separators=(",", ":"))
    record = summary_record(text)
    if record is None:
        return None
    if record.get("kind") == UNAVAILABLE_KIND:
        notice = monitor_unavailable(record)
        return json.dumps({"kind": UNAVAILABLE_KIND, "reason": notice.reason, "message": notice.message})
    if record.get("kind") != WINDOW_KIND:
        return None
    try:
        window = window_summary(record)
    except BadRecord:
        return None
    return json.dumps(dict(window.fields), separators=(",", ":"), allow_nan=False)


def _refuse_constant(name: str) -> Any:
    raise Refused(400, f"{name} is not a JSON number")


def _body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(400, "body is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "body must be a JSON object")
    return data


def _name(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS or "/" in value:
        raise Refused(400, f"{key} must be a name of 1 to {MAX_NAME_CHARS} characters")
    return value


# --- the pass's side ------------------------------------------------------------------------------
_active: Intake | None = None
_server: IntakeServer | None = None


def active() -> Intake | None:
    """The intake this operator process serves, if any."""
    return _active


def activate(intake: Intake | None) -> None:
    global _active
    _active = intake


def monitor_texts(
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    namespace: str,
    owner: Owner,
    now: datetime,
    api: Any,
    intake: Intake | None = None,
) -> dict[str, str]:
    """The monitor lines of each started pod of the GPUJob not yet folded into ``status``, by
    :func:`~orchestrator.backends.kubernetes.gpu_usage.monitor_key`: what its monitor pushed, after its log when
    the log must be read (:meth:`Intake.needs_read`). Without an intake: every log, every pass."""
    intake = intake or _active
    if intake is None:
        return read_monitor_logs(status, pods, namespace, now, api)
    intake.ensure_token_secret(owner, namespace, api)
    unwritten = intake.unwritten(owner.uid, status)
    feeds = intake.drain(owner.uid)
    started = [p for p in pods if (p.get("status") or {}).get("phase") in LOGGED_PHASES]
    to_read = [p for p in started if intake.needs_read(owner.uid, (m := monitor_key(p)), feeds.get(m), now)]
    read = read_monitor_logs(status, to_read, namespace, now, api)
    wanted = {monitor_key(p) for p in to_read}
    texts: dict[str, str] = {}
    for pod in started:
        monitor = monitor_key(pod)
        feed = feeds.get(monitor)
        again = unwritten.get(monitor, [])
        if monitor in wanted and monitor not in read:
            if feed is not None:  # folding newer lines first would skip the unread older windows
                intake.requeue(owner.uid, monitor, feed)
            intake.hand(owner.uid, monitor, again)
            continue
        if feed is None and monitor not in read and not again:
            continue
        if feed is not None or monitor in read:
            intake.took(owner.uid, monitor, pushed=feed is not None, now=now)
        lines = [*read.get(monitor, "").splitlines(), *again, *(feed.lines if feed else [])]
        intake.hand(owner.uid, monitor, lines)
        texts[monitor] = "\n".join(lines)
    intake.keep_only(owner.uid, {monitor_key(p) for p in pods})
    return texts


# --- the HTTP server ------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    intake: Intake
    timeout = REQUEST_TIMEOUT_S

    def do_POST(self) -> None:
        started = time.thread_time()
        try:
            self._answer(*self._take())
        finally:
            self.intake.cpu_s += time.thread_time() - started

    def _take(self) -> tuple[int, dict[str, Any]]:
        if self.path != INTAKE_PATH:
            return 404, {"error": "not found"}
        try:
            length = int(self.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if length < 0:
            return 411, {"error": "Content-Length required"}
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return 413, {"error": f"body over {MAX_BODY_BYTES} bytes"}
        try:
            kept = self.intake.accept(self.headers.get("Authorization"), self.rfile.read(length))
        except Refused as refused:
            self.intake.refused += 1
            return refused.status, {"error": str(refused)}
        self.intake.posts += 1
        return 200, {"kept": kept}

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("intake: " + format, *args)


class IntakeServer:
    """:class:`Intake` served over HTTP on ``port`` (0: any free one) in a thread of its own."""

    def __init__(self, intake: Intake, port: int, addr: str = "0.0.0.0") -> None:
        handler = type("IntakeHandler", (_Handler,), {"intake": intake})
        self.intake = intake
        self.server = ThreadingHTTPServer((addr, port), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="gpuctl-intake", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_from_env() -> IntakeServer | None:
    """Serve the intake when ``GPUCTL_INTAKE_PORT`` and ``GPUCTL_INTAKE_KEY`` are set, and make it the
    one passes fold from; None (every log read each pass) otherwise."""
    global _server
    port, key = os.environ.get(ENV_PORT), os.environ.get(ENV_KEY)
    if not port or not key:
        return None
    if len(key.encode()) < MIN_KEY_BYTES or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UserError(
            f"{ENV_KEY} must hold at least {MIN_KEY_BYTES} bytes and {ENV_PORT} a port number",
            "set the chart's intake.port, and leave the key to the Secret the chart makes (or give "
            "intake.existingSecret a Secret whose intake-key is long enough)",
        )
    if _server is not None:  # the operator started again in this process (tests)
        _server.close()
    _server = IntakeServer(Intake(key.encode()), int(port))
    activate(_server.intake)
    log.info("intake for monitor records on port %d", _server.port)
    return _server
