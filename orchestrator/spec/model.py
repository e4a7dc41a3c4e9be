"""The typed model of a job spec (job.yaml).

One source of truth: the JSON Schema printed by ``gpuctl spec schema`` and the Kubernetes CRD's
OpenAPI schema are both generated from these classes.

Field names are close to SkyPilot tasks and Kubeflow PyTorchJobs::

    name: quickstart
    command: train.py --epochs 3          # run once per node under torchrun
    resources: {gpu_types: [V100], gpus_per_node: 1, nodes: 2}
    market: {mode: spot-with-fallback, zones: [us-east-1a]}
    goals: {deadline: 2h, budget_usd: 5}
    checkpoint: {path: ./checkpoints, every_steps: 20, keep: 3, notice_grace_seconds: 30}
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.spec.durations import Deadline, Duration
from orchestrator.spec.env import ENV_NAME, EnvReference, EnvValue
from orchestrator.spec.limits import (
    MAX_COMPUTE_HOURS,
    MAX_COUNT,
    MAX_CPUS_PER_NODE,
    MAX_GLOBAL_BATCH,
    MAX_GPUS_PER_NODE,
    MAX_KEEP,
    MAX_LIST_ITEMS,
    MAX_MEMORY_GIB_PER_NODE,
    MAX_NODES,
    MAX_NOTICE_GRACE_SECONDS,
    MAX_STEPS,
    MAX_USD,
    Line,
    Text,
    shown,
)
from orchestrator.spec.notify import NotifyTarget, NotifyTargets

NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
QUEUE_NAME_MAX = 63
"""A Kueue LocalQueue name travels in a pod label value: a DNS-1123 label, 63 characters at most."""
DEVICE_ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
        "HABANA_VISIBLE_DEVICES",
        "HABANA_VISIBLE_MODULES",
        "NEURON_RT_VISIBLE_CORES",
    }
)
DEVICE_ENV_PREFIXES = ("NVIDIA_",)
"""Variables that choose which devices a process (or the NVIDIA container runtime) sees: the backend
sets them from the GPUs the job was given, never the job's ``env``."""


def device_env_names(env: Mapping[str, object]) -> list[str]:
    """The names in ``env`` that select devices (:data:`DEVICE_ENV_NAMES`, ``NVIDIA_*``), any case."""
    return [k for k in env if k.upper() in DEVICE_ENV_NAMES or k.upper().startswith(DEVICE_ENV_PREFIXES)]


class _Strict(BaseModel):
    """Unknown fields are errors, so a misspelled key never silently does nothing.

    Numbers are finite (``.inf`` and ``.nan`` are refused: JSON cannot store them) and bounded
    (:mod:`orchestrator.spec.limits`); strings refuse control characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MarketMode(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    SPOT_WITH_FALLBACK = "spot-with-fallback"


class GpuChoice(StrEnum):
    ORDERED = "ordered"
    """Take the first type in ``gpu_types`` that has capacity and fits the budget."""
    CHEAPEST = "cheapest"
    """Take the cheapest of ``gpu_types`` for the work."""


class RightSize(StrEnum):
    OFF = "off"
    RECOMMEND = "recommend"
    AUTO = "auto"


class NodeRange(_Strict):
    min: Annotated[int, Field(ge=1, le=MAX_NODES, description="fewest nodes the job may run on")]
    max: Annotated[int, Field(ge=1, le=MAX_NODES, description="most nodes the job may use")]

    @model_validator(mode="after")
    def _min_not_above_max(self) -> NodeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max}); set min <= max")
        return self


class Resources(_Strict):
    gpu_types: Annotated[
        list[Line],
        Field(
            min_length=1,
            max_length=MAX_LIST_ITEMS,
            description="acceptable GPU types (catalog names such as H100, A100-80GB, L4)",
        ),
    ] = ["V100"]
    gpu_choice: GpuChoice = GpuChoice.ORDERED
    gpus_per_node: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)] = 1
    nodes: Annotated[
        int | NodeRange, Field(description="a fixed number of nodes, or {min, max} for an elastic job")
    ] = 1
    cpus_per_node: Annotated[float | None, Field(gt=0, le=MAX_CPUS_PER_NODE)] = None
    memory_gib_per_node: Annotated[float | None, Field(gt=0, le=MAX_MEMORY_GIB_PER_NODE)] = None

    @field_validator("nodes")
    @classmethod
    def _positive_nodes(cls, v: int | NodeRange) -> int | NodeRange:
        if isinstance(v, int) and v < 1:
            raise ValueError("nodes must be at least 1")
        if isinstance(v, int) and v > MAX_NODES:
            raise ValueError(f"nodes ({v}) is above {MAX_NODES}; ask for at most {MAX_NODES} nodes")
        return v

    @property
    def min_nodes(self) -> int:
        return self.nodes.min if isinstance(self.nodes, NodeRange) else self.nodes

    @property
    def max_nodes(self) -> int:
        return self.nodes.max if isinstance(self.nodes, NodeRange) else self.nodes

    @property
    def elastic(self) -> bool:
        return self.min_nodes != self.max_nodes


class Market(_Strict):
    mode: MarketMode = MarketMode.SPOT_WITH_FALLBACK
    cloud: Line | None = Field(default=None, description="aws, gcp or azure; any when unset")
    regions: Annotated[list[Line], Field(max_length=MAX_LIST_ITEMS)] = []
    zones: Annotated[list[Line], Field(max_length=MAX_LIST_ITEMS)] = []
    max_hourly_usd: Annotated[
        float | None, Field(gt=0, le=MAX_USD, description="cap on the whole job's hourly price")
    ] = None
    policy: Line | None = Field(
        default=None, description="market/zone policy name; gpuctl's default (plan-ahead) if unset"
    )
    changeover: Duration = Field(
        default=Duration("12m"),
        description="what one relaunch costs (start-up plus work since the last checkpoint), such as '12m'; "
        "policies keep slack for it",
    )


class Goals(_Strict):
    deadline: Deadline | None = Field(
        default=None, description="a duration from submission ('6h') or an ISO 8601 time"
    )
    budget_usd: Annotated[float | None, Field(gt=0, le=MAX_USD)] = None
    compute_hours: Annotated[
        float | None,
        Field(
            gt=0,
            le=MAX_COMPUTE_HOURS,
            description="estimated work at full size, for deadline-aware placement",
        ),
    ] = None


class Checkpoint(_Strict):
    path: Line | None = Field(
        default=None, description="directory or s3://bucket/prefix; default: the job's folder in GPUCTL_HOME"
    )
    every_steps: Annotated[int | None, Field(ge=1, le=MAX_STEPS)] = None
    every: Duration | None = Field(default=None, description="time between checkpoints, such as '5m'")
    keep: Annotated[int, Field(ge=1, le=MAX_KEEP)] = 3
    notice_grace_seconds: Annotated[
        float,
        Field(
            ge=0, le=MAX_NOTICE_GRACE_SECONDS, description="time between the preemption notice and the kill"
        ),
    ] = 30.0

    @field_validator("every")
    @classmethod
    def _every_parses(cls, v: Duration | None) -> Duration | None:
        if v is not None and v.total_seconds() <= 0:
            raise ValueError("must be longer than zero")
        return v


class Recovery(_Strict):
    max_restarts: Annotated[
        int, Field(ge=0, le=MAX_COUNT, description="crashes (not preemptions) retried before FAILED")
    ] = 3
    retry_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default=[],
        max_length=MAX_LIST_ITEMS,
        description="exit codes of the training command that mean 'retry'; any when empty",
    )
    max_preemptions: Annotated[int | None, Field(ge=0, le=MAX_COUNT)] = None


class Policies(_Strict):
    right_size: RightSize = Field(
        default=RightSize.OFF,
        description="off; recommend (record the cheapest measured GPU type that meets the deadline); "
        "auto (also place the job on it)",
    )
    rescale: bool = True
    global_batch: Annotated[
        int | None,
        Field(ge=1, le=MAX_GLOBAL_BATCH, description="samples per optimizer step, kept across world sizes"),
    ] = None

    @field_validator("right_size", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML reads a bare `off` as false


class Tune(StrEnum):
    OFF = "off"
    AUTO = "auto"


class RuntimeOptions(_Strict):
    tune: Tune = Field(
        default=Tune.OFF,
        description="off; auto (the training runtime times a few steps of each DataLoader worker count, "
        "pinned-memory and prefetch setting, runs on with the fastest and reports the step time before "
        "and after; the data order is unchanged)",
    )

    @field_validator("tune", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML reads a bare `off` as false


class WatchdogAction(StrEnum):
    ALERT = "alert"
    """Raise the ``stalled``/``idle`` event and change nothing."""
    CHECKPOINT_AND_STOP = "checkpoint-and-stop"
    """Send the notice (training checkpoints if it still can), stop the nodes, FAILED(stalled)."""
    RESTART = "restart"
    """Stop the attempt and resume from the newest checkpoint on a new one (counts as a restart)."""


class Watchdog(_Strict):
    stall_after: Duration | None = Field(
        default=None,
        description="a running attempt whose step counter has not advanced this long is stalled "
        "(default: the larger of 10m and 20 median step times)",
    )
    idle_after: Duration | None = Field(
        default=None,
        description="a running attempt whose GPUs stayed under 5 % utilization this long is idle "
        "(from the GPU monitor; default: off)",
    )
    action: WatchdogAction = Field(
        default=WatchdogAction.ALERT, description="alert, checkpoint-and-stop or restart"
    )

    @field_validator("stall_after", "idle_after")
    @classmethod
    def _positive(cls, v: Duration | None) -> Duration | None:
        if v is not None and v.total_seconds() <= 0:
            raise ValueError("must be longer than zero")
        return v


class JobSpec(_Strict):
    """A training job: what runs, on what, under which goals."""

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="lowercase letters, digits and '-'")]
    team: Line = "default"
    user: Line = Field(default_factory=lambda: os.environ.get("GPUCTL_USER") or getpass.getuser())
    labels: Annotated[dict[Line, Line], Field(max_length=MAX_LIST_ITEMS)] = {}
    command: Annotated[
        Text | list[Text],
        Field(description="script and arguments, run once per node under torchrun: 'train.py --lr 0.1'"),
    ]
    workdir: Line = "."
    env: Annotated[
        dict[str, EnvValue],
        Field(
            max_length=MAX_LIST_ITEMS * 4,
            description="environment variables of the training processes: a value, "
            "{secret: NAME, key: KEY} or {from_env: VARIABLE} (read at launch time, never stored)",
        ),
    ] = {}
    setup: Text | None = Field(default=None, description="shell commands run once per node before training")
    image: Line | None = Field(default=None, description="container image (Kubernetes)")
    queue: Annotated[
        Annotated[str, Field(max_length=QUEUE_NAME_MAX, pattern=NAME_PATTERN)] | None,
        Field(
            description="Kueue LocalQueue of the job's namespace (Kubernetes): the pods of each attempt are "
            "admitted together under its quota; the chart's kueueQueue when unset",
        ),
    ] = None
    resources: Resources = Resources()
    market: Market = Market()
    goals: Goals = Goals()
    checkpoint: Checkpoint = Checkpoint()
    recovery: Recovery = Recovery()
    policies: Policies = Policies()
    runtime: RuntimeOptions = RuntimeOptions()
    notify: NotifyTargets = []
    watchdog: Watchdog = Watchdog()

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, v: str | list[str]) -> str | list[str]:
        try:
            tokens = shlex.split(v) if isinstance(v, str) else v
        except ValueError:  # shlex: "No closing quotation", "No escaped character"
            raise ValueError(
                "command has an unclosed quote or a trailing backslash; close the quote, "
                "or give the command as a list of arguments"
            ) from None
        if not tokens:
            raise ValueError("command is empty; give the training script, e.g. 'train.py --epochs 3'")
        return v

    @field_validator("queue", mode="before")
    @classmethod
    def _queue_name(cls, v: Any) -> Any:
        """Before the pattern check, so that the message says what a queue name is."""
        if isinstance(v, str) and not re.fullmatch(NAME_PATTERN, v):
            raise ValueError(
                f"{shown(v)} is not a Kueue LocalQueue name; give the name of a LocalQueue in the job's "
                f"namespace: at most {QUEUE_NAME_MAX} lowercase letters, digits and '-', starting and ending "
                "with a letter or digit"
            )
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str | EnvReference]) -> dict[str, str | EnvReference]:
        for key in v:
            if not ENV_NAME.fullmatch(key):
                raise ValueError(
                    f"{shown(key)} is not a valid environment variable name; "
                    "use letters, digits and '_', not starting with a digit"
                )
        return v

    @field_validator("env")
    @classmethod
    def _no_device_env(cls, v: dict[str, str | EnvReference]) -> dict[str, str | EnvReference]:
        names = device_env_names(v)
        if names:
            raise ValueError(
                f"{', '.join(names)} would choose the GPUs the job sees, which gpuctl sets from the GPUs "
                "it gives the job; remove them from env and ask for GPUs with resources.gpus_per_node"
            )
        return v

    @property
    def command_argv(self) -> list[str]:
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def notify_targets(self) -> tuple[NotifyTarget, ...]:
        return tuple(self.notify)
