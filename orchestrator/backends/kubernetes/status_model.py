"""A GPUJob's ``.status``: one typed model for the operator's writer, ``gpuctl status`` and the CRD.

The status is the job's state (:class:`~orchestrator.state.job_state.JobState`, written by
:meth:`JobState.to_status`) plus display fields beside it: the placement's names and price, the node
counts, the cost so far, the conditions, the forecast of a running job and what the GPU monitors
measured (the newest progress and the throughput measured per GPU type are the state's).
:class:`GpuJobStatus` holds both typed; :meth:`GpuJobStatus.to_status` is the dict the operator
writes, :meth:`GpuJobStatus.read` reads any GPUJob's status back (a field this version cannot read is
left out, never an error), and :func:`status_openapi_schema` is the CRD's status schema, generated from
these classes, never written twice.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator
from pydantic.alias_generators import to_camel

from orchestrator.errors import InternalError
from orchestrator.state.forecast import Forecast
from orchestrator.state.gpu_usage import GpuUsage, UsageTotals
from orchestrator.state.job_state import STATUS_KEYS, JobState
from orchestrator.times import iso_z

CONDITION_REASONS = ("Placed", "Running", "Preempted", "Rescaled", "Succeeded", "Failed", "Cancelled")
WAITING_REASONS = ("Pending", "Placing", "NoSpot", "Checkpoint", "Queued", "Unschedulable", "Starting",
                   "Rescaling", "Preempted", "Recovering", "Launching", "UserJobs", "UserHourly")  # fmt: skip
"""Reasons of the ``Waiting`` condition: the wait's code (orchestrator/controller/waiting.py) in CamelCase."""

_DATE_TIME = {"format": "date-time"}
_T = typing.TypeVar("_T")


class _Camel(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(_Camel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = Field(
        default=None,
        description="one of "
        + ", ".join(CONDITION_REASONS)
        + "; for Waiting (why the job waits, with the evidence in message): "
        + ", ".join(WAITING_REASONS),
    )
    message: str | None = None
    last_transition_time: Annotated[str | None, Field(json_schema_extra=_DATE_TIME)] = None


class ForecastStatus(_Camel):
    """``status.forecast``: a running job's forecast, from its measured step rate and the steps left."""

    finish_at: Annotated[str, Field(description="expected finish (ETA)", json_schema_extra=_DATE_TIME)]
    eta_seconds: float
    steps_per_second: float
    cost_to_finish_usd: float = Field(description="the time left at the current market's price")
    cost_to_finish_on_demand_usd: float = Field(description="the time left at the on-demand price")
    projected_cost_usd: float = Field(description="spent so far plus the cost to finish")
    deadline_at_risk: bool | None = None
    budget_at_risk: bool | None = None

    @classmethod
    def of(cls, found: Forecast) -> ForecastStatus:
        """``finishAt`` to the second (the ETA printer column), money to the micro-dollar."""
        return cls(
            finish_at=iso_z(found.finish_at.replace(microsecond=0)),
            eta_seconds=round(found.eta_seconds, 3),
            steps_per_second=found.steps_per_second,
            cost_to_finish_usd=round(found.cost_to_finish_usd, 6),
            cost_to_finish_on_demand_usd=round(found.cost_to_finish_on_demand_usd, 6),
            projected_cost_usd=round(found.projected_cost_usd, 6),
            deadline_at_risk=found.deadline_at_risk,
            budget_at_risk=found.budget_at_risk,
        )


@dataclass(frozen=True)
class GpuUsageStatus(GpuUsage):
    """``status.gpuUsage``: :class:`GpuUsage` with its own (snake_case) keys, as the operator writes it."""

    __pydantic_config__ = ConfigDict(allow_inf_nan=False)


class MonitorMark(_Camel):
    monitor: str
    last_window_end: float


class GpuActivityStatus(_Camel):
    """When the GPUs were last measured and last busy (epoch seconds), for the idle watchdog."""

    measured_until: float | None = None
    busy_until: float | None = None
    util_pct: float | None = None


_SCALAR_TYPES: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _dataclass_properties(cls: type, special: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """OpenAPI properties of a dataclass of scalars (``X | None``: nullable); ``special``: the others."""
    properties: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if name in special:
            properties[name] = special[name]
            continue
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        scalar = args[0] if len(args) == 1 else hint
        if scalar not in _SCALAR_TYPES:
            raise InternalError(f"no OpenAPI type for {cls.__name__}.{name}: {hint}")
        properties[name] = {"type": _SCALAR_TYPES[scalar], **({"nullable": True} if args else {})}
    return properties


def _usage_totals_schema() -> dict[str, Any]:
    p95 = {"type": "array", "items": {"type": "object", "properties": {"pct": {"type": "number"},
                                                                       "samples": {"type": "integer"}}}}  # fmt: skip
    return {
        "type": "object",
        "description": "running sums over the monitors' windows that gpuUsage follows from",
        "properties": _dataclass_properties(UsageTotals, {"util_p95_samples": p95}),
    }


_OPENAPI_AS_IS = "x-gpuctl-openapi"
"""A field whose CRD schema is given in OpenAPI form already (not converted from JSON Schema)."""


def _openapi(schema: dict[str, Any]) -> Any:
    return WithJsonSchema({_OPENAPI_AS_IS: schema})


class StatusDisplay(_Camel):
    """The display fields of a GPUJob's status: what the operator writes beside the job state."""

    gpu_type: str | None = None
    market: str | None = None
    zone: str | None = None
    node_price_usd_per_hour: float | None = None
    nodes: int | None = Field(default=None, description="nodes of the attempt not ended (pods)")
    desired_nodes: int | None = None
    cost_usd: float | None = None
    observed_generation: int | None = None
    user: str | None = Field(
        default=None, description="who the job's cost goes to: its namespace, whatever spec.user says"
    )
    # Written by operators before the engine (pod names); read once, so kept for upgrades.
    pods: list[str] | None = Field(default=None, description="deprecated: attemptNodes")
    ended_nodes: list[str] | None = Field(default=None, description="deprecated")
    conditions: list[Condition] | None = None
    forecast: ForecastStatus | None = Field(
        default=None,
        description="from the measured step rate and the steps left (running jobs; absent otherwise)",
    )
    gpu_usage: GpuUsageStatus | None = Field(
        default=None,
        description="what the GPU monitors measured (fields of `gpuctl status -o json` gpu_usage)",
    )
    gpu_usage_totals: Annotated[dict[str, Any] | None, _openapi(_usage_totals_schema())] = None
    gpu_monitors: list[MonitorMark] | None = Field(
        default=None, description="per monitor sidecar (pod name/uid): end time of the last window taken"
    )
    gpu_monitor_message: str | None = Field(default=None, description="why a monitor measures nothing")
    gpu_activity: GpuActivityStatus | None = Field(
        default=None,
        description="when the GPUs were last measured and last busy (epoch seconds), for the idle watchdog",
    )

    @field_validator("gpu_usage", mode="before")
    @classmethod
    def _usage_nulls_left_out(cls, value: Any) -> Any:
        """The writer leaves null fields out (``smActivityMean`` without GPM)."""
        return {"sm_activity_mean": None, **value} if isinstance(value, Mapping) else value


DISPLAY_KEYS = frozenset(f.alias or name for name, f in StatusDisplay.model_fields.items()) - STATUS_KEYS
"""The keys of a GPUJob's status this model writes beside the job state (the state's keys win)."""


@dataclass(frozen=True)
class GpuJobStatus:
    """A GPUJob's whole ``.status``: the job's state and the display fields beside it."""

    state: JobState
    display: StatusDisplay = field(default_factory=StatusDisplay)

    def to_status(self) -> dict[str, Any]:
        """The ``.status`` the operator writes: camelCase JSON, unset fields left out (a merge patch
        would delete a null one)."""
        shown = self.display.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {**{k: v for k, v in shown.items() if k in DISPLAY_KEYS}, **self.state.to_status()}

    @classmethod
    def read(cls, status: Mapping[str, Any]) -> GpuJobStatus:
        """Any GPUJob's status: a key this version cannot read is left out (its default), so one damaged
        field never hides the rest."""
        state_part = {k: v for k, v in status.items() if k in STATUS_KEYS}
        return cls(_lenient(JobState.from_status, state_part), _lenient(StatusDisplay.model_validate, status))


def _lenient(read: typing.Callable[[Mapping[str, Any]], _T], data: Mapping[str, Any]) -> _T:
    """``read(data)``, leaving out the top-level keys it refuses until it reads (at worst: none)."""
    kept = dict(data)
    for _ in range(len(kept) + 1):
        try:
            return read(kept)
        except (ValidationError, ValueError, TypeError, KeyError) as err:
            bad = _bad_keys(err, kept)
            if not bad:
                break
            for key in bad:
                kept.pop(key, None)
    return read({})


def _bad_keys(err: Exception, data: Mapping[str, Any]) -> set[str]:
    """The top-level keys ``err`` refuses; a segment's own error (the state reads each segment by
    itself) names the segments."""
    if isinstance(err, ValidationError) and err.title in (JobState.__name__, StatusDisplay.__name__):
        found = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
        aliases = {to_camel(k): k for k in data} | {k: k for k in data}
        return {aliases[k] for k in found if k in aliases}
    return {"segments"} & set(data)


def _without_keys(node: Any, keys: frozenset[str]) -> Any:
    if isinstance(node, dict):
        return {k: _without_keys(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without_keys(v, keys) for v in node]
    return node


def state_openapi_schema(structural: typing.Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The job state's part of the status schema (every key the engine's state writes: the API server
    prunes the others). No defaults (the API server would fill them into every status) and nothing
    required (unset fields are left out). ``structural``: the JSON Schema -> structural OpenAPI conversion."""
    found: dict[str, Any] = _without_keys(
        structural(JobState.status_schema()), frozenset({"default", "required"})
    )
    return found


def display_openapi_schema(structural: typing.Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The display fields' part: unset fields are left out, so none is nullable, required or defaulted
    (but a condition's type and status)."""
    schema = StatusDisplay.model_json_schema(by_alias=True, mode="serialization")
    as_is = {name: sub[_OPENAPI_AS_IS] for name, sub in schema["properties"].items() if _OPENAPI_AS_IS in sub}
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in as_is}
    converted: dict[str, Any] = _without_keys(
        structural(schema), frozenset({"default", "required", "nullable"})
    )
    converted["properties"].update(as_is)
    conditions = converted["properties"]["conditions"]
    conditions["items"]["required"] = ["type", "status"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return converted
