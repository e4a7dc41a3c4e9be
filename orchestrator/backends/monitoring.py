"""How backends start the GPU monitor (``python -m orchestrator.monitor``) beside the trainer on each node.

Settings come from the job's options (``gpuctl submit --monitor-source``), else from the environment
of the controller (or of ``gpuctl sbatch``):

    GPUCTL_MONITOR_SOURCE    nvml (default) | replay:FILE (replays recorded samples, looping) | off
    GPUCTL_MONITOR_PORT      /metrics port; 0 (default) picks a free one, -1 serves none
    GPUCTL_MONITOR_INTERVAL  sampling interval (default 1s)
    GPUCTL_MONITOR_WINDOW    summary window (default 60s)
    GPUCTL_MONITOR_CLOUD     preemption notices to watch: none (default), aws, gcp, auto
    GPUCTL_MONITOR_ADDR      SLURM only: /metrics listen address on the nodes (default 127.0.0.1;
                             0.0.0.0 where a Prometheus outside the node scrapes it)
    GPUCTL_MONITOR_COMMAND   SLURM only: how compute nodes run the monitor (default
                             ``python3 -m orchestrator.monitor``)

Each node's monitor appends its window summaries to ``monitor-summary-<node>.jsonl`` in the job
folder; the controller stores them (:mod:`orchestrator.state.usage`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError

ENV_SOURCE = "GPUCTL_MONITOR_SOURCE"
ENV_PORT = "GPUCTL_MONITOR_PORT"
ENV_INTERVAL = "GPUCTL_MONITOR_INTERVAL"
ENV_WINDOW = "GPUCTL_MONITOR_WINDOW"
ENV_CLOUD = "GPUCTL_MONITOR_CLOUD"
ENV_COMMAND = "GPUCTL_MONITOR_COMMAND"
ENV_ADDR = "GPUCTL_MONITOR_ADDR"

OPTIONS_KEY = "monitor"
"""Key of the monitor settings in a job's stored options."""

CLOUDS = ("none", "aws", "gcp", "auto")


def parse_source(text: str) -> str:
    """Check a source spec (``nvml``, ``off`` or ``replay:FILE``); a replay FILE is made absolute."""
    value = text.strip()
    if value in ("nvml", "off"):
        return value
    if value.startswith("replay:") and value[len("replay:") :]:
        file = Path(value[len("replay:") :]).expanduser()
        if not file.is_file():
            raise UserError(
                f"monitor replay file {file} does not exist",
                "give a JSON-lines sample file (format in docs/monitor.md), e.g. "
                "replay:tests/data/monitor/h100x8_synthetic.jsonl",
            )
        return f"replay:{file.resolve()}"
    raise UserError(
        f"unknown GPU monitor source {text!r}", "use nvml, off, or replay:FILE (recorded samples)"
    )


@dataclass(frozen=True)
class MonitorSettings:
    source: str = "nvml"
    port: int = 0
    interval: str = "1s"
    window: str = "60s"
    cloud: str = "none"
    command: tuple[str, ...] = ("python3", "-m", "orchestrator.monitor")
    addr: str = "127.0.0.1"
    """Where SLURM nodes' monitors listen: loopback unless something scrapes them from outside."""

    @property
    def enabled(self) -> bool:
        return self.source != "off"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MonitorSettings:
        env = os.environ if env is None else env
        settings = cls()
        if env.get(ENV_SOURCE):
            settings = replace(settings, source=parse_source(env[ENV_SOURCE]))
        if env.get(ENV_PORT):
            try:
                settings = replace(settings, port=int(env[ENV_PORT]))
            except ValueError as exc:
                raise UserError(f"{ENV_PORT}={env[ENV_PORT]!r} is not a port", "use 0, -1 or a port") from exc
        if env.get(ENV_INTERVAL):
            settings = replace(settings, interval=env[ENV_INTERVAL])
        if env.get(ENV_WINDOW):
            settings = replace(settings, window=env[ENV_WINDOW])
        if env.get(ENV_CLOUD):
            if env[ENV_CLOUD] not in CLOUDS:
                raise UserError(
                    f"{ENV_CLOUD}={env[ENV_CLOUD]!r} is unknown", f"use one of {', '.join(CLOUDS)}"
                )
            settings = replace(settings, cloud=env[ENV_CLOUD])
        if env.get(ENV_ADDR):
            settings = replace(settings, addr=env[ENV_ADDR].strip())
        if env.get(ENV_COMMAND):
            settings = replace(settings, command=tuple(shlex.split(env[ENV_COMMAND])))
        return settings

    @classmethod
    def for_job(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> MonitorSettings:
        """The environment's settings with the job's stored ones (``options["monitor"]``) on top."""
        settings = cls.from_env(env)
        stored = options.get(OPTIONS_KEY) or {}
        if stored.get("source"):
            settings = replace(settings, source=str(stored["source"]))
        return settings

    def options(self) -> dict[str, Any]:
        """What ``gpuctl submit`` stores with the job."""
        return {"source": self.source}

    def arguments(self, job_id: str, addr: str) -> list[str]:
        """Monitor options, without the summary file and the PID to notify (known only on the node)."""
        if self.source.startswith("replay:"):
            source = ["--source", "replay", self.source[len("replay:") :], "--loop"]
        else:
            source = ["--source", "nvml"]
        return [
            *source,
            f"--job={job_id}",
            f"--interval={self.interval}",
            f"--window={self.window}",
            f"--port={self.port}",
            f"--addr={addr}",
            f"--cloud={self.cloud}",
        ]

    def local_argv(self, job_id: str) -> list[str]:
        """The local backend runs the monitor with this interpreter, /metrics on loopback."""
        return [sys.executable, "-m", "orchestrator.monitor", *self.arguments(job_id, "127.0.0.1")]
