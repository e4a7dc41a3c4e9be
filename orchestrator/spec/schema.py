"""JSON Schema of the job spec: printed by ``gpuctl spec schema`` and the source of the CRD schema."""

from __future__ import annotations

from typing import Any

from orchestrator.spec.model import JobSpec

SCHEMA_ID = "https://gpuctl.dev/schemas/job-spec.json"


def job_spec_json_schema() -> dict[str, Any]:
    schema = JobSpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    # `user` defaults to the submitting account; it is filled in at load time, not a fixed default.
    schema["properties"]["user"].pop("default", None)
    return schema
