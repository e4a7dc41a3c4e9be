"""The GPUJob CustomResourceDefinition, generated from the job spec model.

One source of truth: ``spec`` of a GPUJob is the job spec, and its OpenAPI schema is converted from
:func:`orchestrator.spec.job_spec_json_schema` into a Kubernetes *structural* schema:

- ``$ref`` to ``$defs`` are inlined;
- ``X | None`` becomes ``X`` with ``nullable: true``;
- unions Kubernetes cannot type (``int | NodeRange``, ``str | list[str]``, an ``env`` value: text or a
  secret reference; ``anyOf`` or ``oneOf``) become
  ``x-kubernetes-preserve-unknown-fields`` (the operator validates them with the pydantic model);
- ``additionalProperties: false``, ``title`` and JSON-Schema-only keywords are dropped, and the draft
  2020-12 numeric ``exclusiveMinimum`` becomes OpenAPI 3.0's ``minimum`` + ``exclusiveMinimum: true``.

Write the chart's copy with ``python -m orchestrator.backends.kubernetes.crd [PATH]``.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InternalError
from orchestrator.spec import job_spec_json_schema
from orchestrator.state.gpu_usage import GpuUsage, UsageTotals
from orchestrator.state.job_state import JobState

GROUP = "gpuctl.dev"
VERSION = "v1alpha1"
PLURAL = "gpujobs"
SINGULAR = "gpujob"
KIND = "GPUJob"
SHORT_NAME = "gj"
API_VERSION = f"{GROUP}/{VERSION}"

CONDITION_REASONS = ("Placed", "Running", "Preempted", "Rescaled", "Succeeded", "Failed")
WAITING_REASONS = ("Pending", "Placing", "NoSpot", "Checkpoint", "Queued", "Unschedulable", "Starting",
                   "Rescaling", "Preempted", "Recovering", "Launching")  # fmt: skip
"""Reasons of the ``Waiting`` condition: the wait's code (orchestrator/controller/waiting.py) in CamelCase."""
DEFAULT_CRD_PATH = Path("charts/gpuctl/crds/gpujob.yaml")

# propertyNames (the bounds on label keys) has no OpenAPI v3 form: the operator's model checks it.
_DROPPED_KEYS = {"title", "$schema", "$id", "$defs", "additionalProperties", "examples", "propertyNames"}
_KEPT_KEYS = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "pattern",
    "format",
    "default",
}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.removeprefix("#/$defs/")
    if name not in defs:
        raise InternalError(f"job spec schema refers to unknown definition {ref!r}")
    merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
    return _resolve(merged, defs)


def _without_nulls(value: Any) -> Any:
    """Defaults with ``null`` members are noise in a CRD: an unset field already means "none"."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def to_structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one JSON Schema node (pydantic's output) into a structural OpenAPI v3 schema node."""
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    union = node.get("anyOf", node.get("oneOf"))  # oneOf: a tagged union, such as an env value
    if union is not None:
        branches = [_resolve(b, defs) for b in union]
        typed = [b for b in branches if b.get("type") != "null"]
        if len(typed) < len(branches):
            out["nullable"] = True
        if len(typed) == 1:
            inner = to_structural(typed[0], defs)
            out = {**inner, **out}
        else:
            # int | NodeRange, str | list[str]: no single structural type; the operator validates.
            out["x-kubernetes-preserve-unknown-fields"] = True
            kinds = " or ".join(str(b.get("type", "value")) for b in typed)
            out["description"] = f"one of: {kinds}"
    for key, value in node.items():
        if key in _DROPPED_KEYS or key in ("anyOf", "oneOf", "$ref"):
            continue
        if key == "properties":
            out["properties"] = {name: to_structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = to_structural(value, defs)
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "default":
            if value is not None:
                out["default"] = _without_nulls(value)
        elif key in _KEPT_KEYS:
            out[key] = value
        else:
            raise InternalError(f"job spec schema keyword {key!r} has no CRD conversion; extend crd.py")
    add = node.get("additionalProperties")
    if isinstance(add, dict):
        out["additionalProperties"] = to_structural(add, defs)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("type", None)
    return out


def spec_openapi_schema() -> dict[str, Any]:
    """The structural schema of a GPUJob's ``spec``. ``name`` defaults to ``metadata.name``."""
    schema = job_spec_json_schema()
    structural = to_structural(schema, schema.get("$defs", {}))
    structural["required"] = [r for r in structural.get("required", []) if r != "name"]
    structural["properties"]["name"]["description"] = "job name; defaults to metadata.name"
    return structural


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


def gpu_usage_schemas() -> dict[str, Any]:
    """Status keys the operator writes from the monitor sidecars' logs (operators/kubernetes/gpu_usage.py)."""
    p95_samples = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"pct": {"type": "number"}, "samples": {"type": "integer"}},
        },
    }
    return {
        "gpuUsage": {
            "type": "object",
            "description": "what the GPU monitors measured (fields of `gpuctl status -o json` gpu_usage)",
            "properties": _dataclass_properties(GpuUsage, {}),
        },
        "gpuUsageTotals": {
            "type": "object",
            "description": "running sums over the monitors' windows that gpuUsage follows from",
            "properties": _dataclass_properties(UsageTotals, {"util_p95_samples": p95_samples}),
        },
        "gpuMonitors": {
            "type": "array",
            "description": "per monitor sidecar (pod name/uid): end time of the last window taken",
            "items": {
                "type": "object",
                "properties": {"monitor": {"type": "string"}, "lastWindowEnd": {"type": "number"}},
            },
        },
        "gpuMonitorMessage": {"type": "string", "description": "why a monitor measures nothing"},
        "gpuActivity": {
            "type": "object",
            "description": "when the GPUs were last measured and last busy (epoch seconds), for the idle watchdog",
            "properties": {
                "measuredUntil": {"type": "number"},
                "busyUntil": {"type": "number"},
                "utilPct": {"type": "number"},
            },
        },
    }


def zone_history_schema() -> dict[str, Any]:
    """The zones' spot availability history the operator keeps (operators/kubernetes/spot_market.py)."""

    def per_zone(kind: dict[str, Any], description: str) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": kind, "description": description}

    hours = {"type": "number", "minimum": 0}
    return {
        "type": "object",
        "description": "spot availability seen per zone since submission: what the market policy reads",
        "properties": {
            "at": {"type": "string", "format": "date-time", "description": "last update"},
            "observedH": {**hours, "description": "hours watched"},
            "anyAvailableH": {**hours, "description": "hours some zone had spot"},
            "availableH": per_zone(hours, "hours each zone had spot"),
            "upRuns": per_zone({"type": "integer", "minimum": 0}, "periods of availability begun per zone"),
            "streakH": per_zone(hours, "length of each zone's current run (up or down)"),
            "lastAvailable": per_zone({"type": "boolean"}, "whether each zone had spot at the last update"),
            "spotShortSeen": per_zone(
                {"type": "string", "format": "date-time"},
                "when each zone's spot pods were last seen unschedulable past the limit",
            ),
        },
    }


def measurements_schema() -> dict[str, Any]:
    """What the job's runs measured per GPU type, for right-size (operators/kubernetes/rightsize.py)."""
    number = {"type": "number"}
    per_type = {
        "type": "object",
        "properties": {
            "steps": {"type": "integer", "description": "training steps measured"},
            "gpuSeconds": {**number, "description": "GPU-seconds those steps took"},
            "seconds": {**number, "description": "seconds of training measured"},
        },
    }
    return {
        "type": "object",
        "description": "training throughput measured per GPU type (what right-size reads)",
        "properties": {
            "byGpuType": {"type": "object", "additionalProperties": per_type},
            "last": {
                "type": "object",
                "description": "the progress record the next measurement starts from",
                "properties": {
                    "step": {"type": "integer"},
                    "time": {"type": "string", "format": "date-time"},
                    "attempt": {"type": "integer"},
                },
            },
        },
    }


def progress_schema() -> dict[str, Any]:
    """``status.progress``: the newest training progress record (operators/kubernetes/progress.py)."""
    return {
        "type": "object",
        "description": "the newest training progress the monitor sidecars printed (as `gpuctl status`)",
        "properties": {
            "step": {"type": "integer"},
            "totalSteps": {"type": "integer"},
            "loss": {"type": "number"},
            "worldSize": {"type": "integer"},
            "finished": {"type": "boolean", "description": "training wrote its final record"},
            "metrics": {
                "type": "object",
                "description": "final metrics the training script reported",
                "additionalProperties": {"type": "number"},
            },
            "time": {"type": "string", "format": "date-time", "description": "by the trainer's clock"},
        },
    }


def forecast_schema() -> dict[str, Any]:
    """``status.forecast``: a running job's forecast (operators/kubernetes/step.py ``forecast_status``)."""
    usd = {"type": "number"}
    return {
        "type": "object",
        "description": "from the measured step rate and the steps left (running jobs; absent otherwise)",
        "properties": {
            "finishAt": {"type": "string", "format": "date-time", "description": "expected finish (ETA)"},
            "etaSeconds": {"type": "number"},
            "stepsPerSecond": {"type": "number"},
            "costToFinishUsd": {**usd, "description": "the time left at the current market's price"},
            "costToFinishOnDemandUsd": {**usd, "description": "the time left at the on-demand price"},
            "projectedCostUsd": {**usd, "description": "spent so far plus the cost to finish"},
            "deadlineAtRisk": {"type": "boolean"},
            "budgetAtRisk": {"type": "boolean"},
        },
    }


def status_openapi_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {
                "type": "string",
                "description": "one of "
                + ", ".join(CONDITION_REASONS)
                + "; for Waiting (why the job waits, with the evidence in message): "
                + ", ".join(WAITING_REASONS),
            },
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "description": "all job state lives here: the operator keeps none of its own",
        "properties": {
            **state_openapi_schema()["properties"],
            "gpuType": {"type": "string"},
            "market": {"type": "string"},
            "zone": {"type": "string"},
            "nodePriceUsdPerHour": {"type": "number"},
            "nodes": {"type": "integer", "description": "nodes of the attempt not ended (pods)"},
            "desiredNodes": {"type": "integer"},
            "costUsd": {"type": "number"},
            "observedGeneration": {"type": "integer"},
            "user": {
                "type": "string",
                "description": "who the job's cost goes to: its namespace, whatever spec.user says",
            },
            # Written by operators before the engine (pod names); read once, so kept for upgrades.
            "pods": {"type": "array", "items": {"type": "string"}, "description": "deprecated: attemptNodes"},
            "endedNodes": {"type": "array", "items": {"type": "string"}, "description": "deprecated"},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "progress": progress_schema(),
            "forecast": forecast_schema(),
            **gpu_usage_schemas(),
            "zoneHistory": zone_history_schema(),
            "gpuMeasurements": measurements_schema(),
        },
    }


def _without_keys(node: Any, keys: frozenset[str]) -> Any:
    if isinstance(node, dict):
        return {k: _without_keys(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without_keys(v, keys) for v in node]
    return node


def state_openapi_schema() -> dict[str, Any]:
    """The job state's part of a GPUJob's status, generated from :meth:`JobState.status_schema`: every
    key the engine's state writes (the API server prunes the others). No defaults (the API server
    would fill them into every status) and nothing required (unset fields are left out)."""
    schema = JobState.status_schema()
    structural = to_structural(schema, schema.get("$defs", {}))
    found: dict[str, Any] = _without_keys(structural, frozenset({"default", "required"}))
    return found


def gpujob_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition manifest."""
    columns = [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "GPU", "type": "string", "jsonPath": ".status.gpuType"},
        {"name": "Market", "type": "string", "jsonPath": ".status.market"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Cost", "type": "number", "jsonPath": ".status.costUsd", "description": "USD so far"},
        {
            "name": "ETA",
            "type": "string",
            "jsonPath": ".status.forecast.finishAt",
            "description": "expected finish of a running job (UTC), from its measured step rate",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["gpuctl"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A GPU training job run by the gpuctl operator.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_openapi_schema(),
                                "status": status_openapi_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    header = "# Generated by `python -m orchestrator.backends.kubernetes.crd`: do not edit by hand.\n"
    return header + yaml.safe_dump(gpujob_crd(), sort_keys=False, width=110)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT_CRD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_crd_yaml(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
