"""The GPUJob CRD: generated from the job spec, structural, and accepting the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from orchestrator.backends.kubernetes.crd import CANCEL_FIELD, gpujob_crd, render_crd_yaml, to_structural
from orchestrator.spec import JobSpec

ROOT = Path(__file__).resolve().parents[3]
CRD_FILE = ROOT / "charts/gpuctl/crds/gpujob.yaml"
EXAMPLE = ROOT / "examples/kubernetes/gpujob.yaml"
KUBE_VERSION = "1.33"


def crd_schema() -> dict[str, Any]:
    schema: dict[str, Any] = gpujob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_equals_generated() -> None:
    assert CRD_FILE.read_text(encoding="utf-8") == render_crd_yaml(), (
        "charts/gpuctl/crds/gpujob.yaml is stale: run `python -m orchestrator.backends.kubernetes.crd`"
    )


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(yaml.safe_load(CRD_FILE.read_text()), KUBE_VERSION, strict=True)


def _walk(node: dict[str, Any], path: str = "") -> list[str]:
    """Structural schema rules: every node typed (or int-or-string / preserve-unknown), no refs or unions."""
    problems = []
    for bad in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title"):
        if bad in node:
            problems.append(f"{path}: has {bad}")
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties false")
    for name, sub in node.get("properties", {}).items():
        problems += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}{{}}")
    return problems


def test_schema_is_structural() -> None:
    assert _walk(crd_schema()) == []


def test_every_job_spec_field_is_in_the_crd() -> None:
    spec_props = crd_schema()["properties"]["spec"]["properties"]
    assert set(spec_props) == set(JobSpec.model_fields) | {CANCEL_FIELD}  # the cancel mark: the operator's
    assert spec_props[CANCEL_FIELD]["type"] == "boolean"
    nodes = spec_props["resources"]["properties"]["nodes"]
    assert nodes.get("x-kubernetes-preserve-unknown-fields") is True
    assert spec_props["command"].get("x-kubernetes-preserve-unknown-fields") is True
    grace = spec_props["checkpoint"]["properties"]["notice_grace_seconds"]
    assert grace == {
        "default": 30.0, "description": grace["description"], "minimum": 0, "maximum": 3600.0, "type": "number"
    }  # fmt: skip
    assert spec_props["resources"]["properties"]["gpu_types"]["items"]["maxLength"] == 4096


def test_conversion_of_optional_and_exclusive_bounds() -> None:
    node = {"anyOf": [{"exclusiveMinimum": 0, "type": "number"}, {"type": "null"}], "default": None}
    assert to_structural(node, {}) == {
        "type": "number",
        "nullable": True,
        "minimum": 0,
        "exclusiveMinimum": True,
    }


def test_status_subresource_columns_and_short_name() -> None:
    version = gpujob_crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "State",
        "GPU",
        "Market",
        "Nodes",
        "Cost",
        "ETA",
        "Age",
    ]
    assert gpujob_crd()["spec"]["names"]["shortNames"] == ["gj"]


def examples() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


@pytest.mark.parametrize("doc", examples(), ids=lambda d: d["metadata"]["name"])
def test_examples_validate_against_the_crd_schema_and_the_model(doc: dict[str, Any]) -> None:
    # Draft 4 reads OpenAPI 3.0's boolean exclusiveMinimum; x-kubernetes-* keywords are ignored.
    jsonschema.Draft4Validator(crd_schema()).validate(doc)
    JobSpec.model_validate({"name": doc["metadata"]["name"], **doc["spec"]})


def test_crd_schema_rejects_bad_values() -> None:
    doc = examples()[1]
    bad = {**doc, "spec": {**doc["spec"], "resources": {"gpus_per_node": 0}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(crd_schema()).validate(bad)
    bad = {**doc, "spec": {**doc["spec"], "market": {"mode": "cheap"}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(crd_schema()).validate(bad)


def test_the_zone_history_in_the_status_refuses_negative_hours_and_runs() -> None:
    """plan-ahead reads these (an outage's age is ``streakH``): a status patched to negative values
    is refused by the API server, not planned on."""
    schema = crd_schema()["properties"]["status"]["properties"]["zoneHistory"]
    good = {"observedH": 3.0, "availableH": {"a": 1.0}, "upRuns": {"a": 2}, "streakH": {"a": 0.5}}
    jsonschema.Draft4Validator(schema).validate(good)
    for key, bad in (("streakH", {"a": -5.0}), ("observedH", -1.0), ("upRuns", {"a": -1})):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft4Validator(schema).validate({**good, key: bad})
