"""The monitor sidecar's loop and its command-line options (shared by `gpuctl monitor` and
`python -m orchestrator.monitor`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TextIO, cast

from orchestrator.contract import ENV_JOB_ID, ENV_NOTICE_FILE
from orchestrator.errors import EnvironmentProblem, TemporaryError, UserError
from orchestrator.monitor.metrics import GpuCollector, MetricsServer
from orchestrator.monitor.notices import NoticeNotifier, NoticeWatcher, make_notice_source
from orchestrator.monitor.progress_lines import ProgressFollower
from orchestrator.monitor.push import Pusher, PushTarget, PushThread, TeeStream
from orchestrator.monitor.samples import GpuSample, ReplaySource
from orchestrator.monitor.summary import (
    DEFAULT_IDLE_THRESHOLD_PCT,
    SummaryWriter,
    WindowAggregator,
    unavailable_record,
)

ENV_SUMMARY_FILE = "GPUCTL_MONITOR_SUMMARY_FILE"
ENV_ADDR = "GPUCTL_MONITOR_ADDR"
"""Default of ``--addr``; unset: loopback (Kubernetes pods pass ``--addr=0.0.0.0`` to be scraped)."""


class SampleSource(Protocol):
    def sample(self) -> list[GpuSample] | None: ...

    def close(self) -> None: ...


class NoGpuSource:
    """No NVML and ``--keep-running``: no samples (an empty /metrics, no windows), while the
    monitor's other duty, watching for preemption notices, goes on."""

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


def parse_duration_s(text: str) -> float:
    """'60', '60s', '2m', '0.5s' -> seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    value = text.strip().lower()
    for suffix in ("ms", "s", "m", "h"):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * units[suffix]
    return float(value)


def add_monitor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        nargs="+",
        default=["nvml"],
        metavar="SOURCE",
        help="where samples come from: nvml (default) or `replay FILE` (JSON lines)",
    )
    parser.add_argument("--loop", action="store_true", help="replay: start over at the end of the file")
    parser.add_argument(
        "--interval", type=parse_duration_s, default=1.0, help="sampling interval (default 1s)"
    )
    parser.add_argument("--window", type=parse_duration_s, default=60.0, help="summary window (default 60s)")
    parser.add_argument(
        "--summary-file",
        default=os.environ.get(ENV_SUMMARY_FILE),
        help=f"append window summaries here (default ${ENV_SUMMARY_FILE})",
    )
    parser.add_argument(
        "--summary-stdout",
        action="store_true",
        help="also print each summary line on stdout (the Kubernetes operator reads the sidecar's log)",
    )
    parser.add_argument(
        "--progress-file",
        default=None,
        help="follow this training progress file and print its records on stdout, prefixed "
        "`gpuctl-progress ` (Kubernetes: the operator reads them from the sidecar's log)",
    )
    parser.add_argument(
        "--progress-interval",
        type=parse_duration_s,
        default=10.0,
        help="--progress-file: print step records at most this often; events at once (default 10s)",
    )
    parser.add_argument(
        "--idle-threshold",
        type=float,
        default=DEFAULT_IDLE_THRESHOLD_PCT,
        help="utilization %% below which a GPU counts as idle (default 1)",
    )
    parser.add_argument("--port", type=int, default=9400, help="/metrics port (0: any free port; -1: none)")
    parser.add_argument(
        "--addr",
        default=os.environ.get(ENV_ADDR) or "127.0.0.1",
        help=f"/metrics listen address (default ${ENV_ADDR}, else 127.0.0.1: this machine only)",
    )
    parser.add_argument("--job", default=os.environ.get(ENV_JOB_ID, ""), help="job label for gpuctl_* series")
    parser.add_argument(
        "--cloud",
        choices=["auto", "aws", "gcp", "none"],
        default="none",
        help="watch this cloud's preemption notice (default none)",
    )
    parser.add_argument("--metadata-url", default=None, help="metadata service base URL (tests, proxies)")
    parser.add_argument("--notice-interval", type=parse_duration_s, default=5.0, help="notice poll interval")
    parser.add_argument(
        "--notify-pid", type=int, default=None, help="on a notice, signal this PID (negative: process group)"
    )
    parser.add_argument(
        "--notice-file",
        default=os.environ.get(ENV_NOTICE_FILE),
        help=f"on a notice, create this file (default ${ENV_NOTICE_FILE})",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="without NVML, keep running (preemption notices, empty /metrics) instead of exiting 3; "
        "for sidecars that are restarted when they exit",
    )
    parser.add_argument("--once", action="store_true", help="print one sample per GPU and exit")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table", help="--once format")
    parser.add_argument("--max-ticks", type=int, default=None, help=argparse.SUPPRESS)


def open_source(args: argparse.Namespace) -> SampleSource:
    kind, *rest = args.source
    if kind == "replay":
        if len(rest) != 1:
            raise UserError("--source replay needs exactly one FILE", "e.g. --source replay samples.jsonl")
        return ReplaySource(rest[0], loop=args.loop)
    if kind == "nvml" and not rest:
        from orchestrator.monitor.nvml_source import NvmlSource

        return NvmlSource()
    raise UserError(f"unknown sample source {' '.join(args.source)!r}", "use `nvml` or `replay FILE`")


def format_samples_text(samples: Sequence[GpuSample]) -> str:
    lines = [
        f"{'GPU':>3}  {'MODEL':<24} {'UTIL%':>5} {'MEM GiB':>15} {'POWER W':>8} {'SM MHz':>6} "
        f"{'TEMP':>4} {'SM ACT':>6}"
    ]
    for s in samples:
        mem = f"{s.mem_used_bytes / 2**30:.1f}/{s.mem_total_bytes / 2**30:.1f}"
        act = "-" if s.sm_activity is None else f"{s.sm_activity:.2f}"
        lines.append(
            f"{s.gpu:>3}  {s.model[:24]:<24} {s.util_pct:>5.0f} {mem:>15} {s.power_w:>8.1f} "
            f"{s.sm_clock_mhz:>6.0f} {s.temp_c:>4.0f} {act:>6}"
        )
    return "\n".join(lines)


def run_once(args: argparse.Namespace) -> int:
    source = open_source(args)
    try:
        samples = source.sample() or []
    finally:
        source.close()
    if args.output == "json":
        print(json.dumps([s.to_dict() for s in samples], indent=2))
    else:
        print(format_samples_text(samples))
    return 0


class Monitor:
    """One tick: sample, update /metrics, add to the window, write a finished summary."""

    def __init__(
        self,
        source: SampleSource,
        collector: GpuCollector,
        aggregator: WindowAggregator,
        writer: SummaryWriter | None,
        log: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.source, self.collector, self.aggregator, self.writer = source, collector, aggregator, writer
        self.log = log
        self.failed_reads = 0

    def tick(self) -> bool:
        """False when the source has no more samples. A failed read is logged and skipped."""
        try:
            samples = self.source.sample()
        except TemporaryError as err:
            self.failed_reads += 1
            if self.failed_reads in (1, 10) or self.failed_reads % 600 == 0:
                self.log(f"{err.what} ({self.failed_reads} failed read(s) so far)")
            return True
        if samples is None:
            return False
        finished = self.aggregator.add(samples)
        self.collector.update(samples, self.aggregator.idle_seconds_total)
        if finished is not None and self.writer is not None:
            self.writer.write(finished)
        return True

    def finish(self) -> None:
        last = self.aggregator.flush()
        if last is not None and self.writer is not None:
            self.writer.write(last)
        self.source.close()


def summary_writer(args: argparse.Namespace, out: TextIO | None = None) -> SummaryWriter | None:
    """Where window summaries go: ``--summary-file`` and/or stdout (``--summary-stdout``, to ``out``
    when given); None: nowhere."""
    if not args.summary_file and not args.summary_stdout:
        return None
    return SummaryWriter(args.summary_file or None, (out or sys.stdout) if args.summary_stdout else None)


def start_push(emit: Callable[[str], None]) -> tuple[TextIO, PushThread | None]:
    """The sidecar's stdout, teed to the operator's intake when the pod's environment names one."""
    target = PushTarget.from_env(dict(os.environ))
    if target is None:
        return sys.stdout, None
    pusher = PushThread(Pusher(target, log=emit))
    pusher.start()
    emit("pushing records to the operator's intake")
    return cast(TextIO, TeeStream(sys.stdout, pusher.pusher)), pusher


def run_monitor(args: argparse.Namespace, log: Callable[[str], None] | None = None) -> int:
    """The sidecar: runs until SIGTERM/SIGINT (or the end of a replay), then writes the last window."""
    emit = log or (lambda line: print(f"gpuctl monitor: {line}", file=sys.stderr, flush=True))
    if args.once:
        return run_once(args)
    out, pusher = start_push(emit)
    writer = summary_writer(args, out)
    source: SampleSource
    try:
        source = open_source(args)
    except EnvironmentProblem as err:  # no NVML: say so in the summary file too, for the controller
        if writer is not None:
            writer.write(unavailable_record(args.job or None, "no_nvml", err.what))
        if not args.keep_running:
            raise
        emit(f"{err.what}: measuring nothing; still watching for preemption notices")
        source = NoGpuSource()
    collector = GpuCollector(job=args.job)
    monitor = Monitor(
        source,
        collector,
        WindowAggregator(args.window, args.interval, args.idle_threshold, args.job or None),
        writer,
        emit,
    )
    server = MetricsServer(collector, args.port, args.addr) if args.port >= 0 else None
    if server is not None:
        emit(f"serving /metrics on {args.addr}:{server.port}")
    watcher = None
    notice_source = make_notice_source(args.cloud, args.metadata_url)
    if notice_source is not None:
        watcher = NoticeWatcher(
            notice_source, NoticeNotifier(args.notify_pid, args.notice_file), args.notice_interval, emit
        )
        watcher.start()
        emit(f"watching {notice_source.cloud} preemption notices every {args.notice_interval:g}s")
    follower = (
        ProgressFollower(args.progress_file, out, args.progress_interval) if args.progress_file else None
    )
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    ticks = 0
    try:
        next_tick = time.monotonic()
        while not stop.is_set() and monitor.tick():
            ticks += 1
            if follower is not None:
                follower.poll()
            if args.max_ticks is not None and ticks >= args.max_ticks:
                break
            next_tick += args.interval
            stop.wait(max(next_tick - time.monotonic(), 0.0))
    finally:
        monitor.finish()
        if follower is not None:
            follower.poll()
            follower.flush()
        if watcher is not None:
            watcher.stop()
        if pusher is not None:
            pusher.stop()
        if server is not None:
            server.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    emit(f"stopped after {ticks} tick(s)")
    return 0
