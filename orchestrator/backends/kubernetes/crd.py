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
from pathlib import Path
from typing import Any

import yaml

from orchestrator.backends.kubernetes import status_model
from orchestrator.errors import InternalError
from orchestrator.spec import job_spec_json_schema

GROUP = "gpuctl.dev"
VERSION = "v1alpha1"
PLURAL = "gpujobs"
SINGULAR = "gpujob"
KIND = "GPUJob"
SHORT_NAME = "gj"
API_VERSION = f"{GROUP}/{VERSION}"
CANCEL_FIELD = "cancel"
"""The ``spec`` field that asks the operator to cancel the job (:mod:`.gpujob`); not a job spec field."""

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
    structural["properties"][CANCEL_FIELD] = {
        "type": "boolean",
        "description": "true: the operator cancels the job (pods get the checkpoint notice, then stop; state "
        "CANCELLED); the GPUJob, its status and its cost stay until it is deleted",
    }
    return structural


def _structural(schema: dict[str, Any]) -> dict[str, Any]:
    return to_structural(schema, schema.get("$defs", {}))


def state_openapi_schema() -> dict[str, Any]:
    """The job state's part of a GPUJob's status, generated from :meth:`JobState.status_schema`."""
    return status_model.state_openapi_schema(_structural)


def status_openapi_schema() -> dict[str, Any]:
    """A GPUJob's status, generated from :mod:`~orchestrator.backends.kubernetes.status_model`: the
    display fields and the job state (whose keys win)."""
    display = status_model.display_openapi_schema(_structural)
    return {
        "type": "object",
        "description": "all job state lives here: the operator keeps none of its own",
        "properties": {**display["properties"], **state_openapi_schema()["properties"]},
    }


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
