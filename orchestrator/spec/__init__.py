"""The job spec: the typed model of job.yaml, its loader and its JSON Schema."""

from orchestrator.spec.durations import Deadline, Duration, format_duration, parse_deadline, parse_duration
from orchestrator.spec.loader import load_spec_file, load_spec_text, spec_from_json
from orchestrator.spec.model import (
    Checkpoint,
    Goals,
    GpuChoice,
    JobSpec,
    Market,
    MarketMode,
    NodeRange,
    Policies,
    Recovery,
    Resources,
    RightSize,
    Watchdog,
    WatchdogAction,
)
from orchestrator.spec.schema import job_spec_json_schema

__all__ = [
    "Checkpoint",
    "Deadline",
    "Duration",
    "Goals",
    "GpuChoice",
    "JobSpec",
    "Market",
    "MarketMode",
    "NodeRange",
    "Policies",
    "Recovery",
    "Resources",
    "RightSize",
    "Watchdog",
    "WatchdogAction",
    "format_duration",
    "job_spec_json_schema",
    "load_spec_file",
    "load_spec_text",
    "parse_deadline",
    "parse_duration",
    "spec_from_json",
]
