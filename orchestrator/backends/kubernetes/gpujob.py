"""A GPUJob as the API server has it: the JobSpec of its ``spec``, its cancel mark, and the merge patch
of its ``status``.

``spec.cancel: true`` asks the operator to cancel the job (``gpuctl cancel --backend kubernetes``, or
``kubectl patch gpujob NAME --type merge -p '{"spec":{"cancel":true}}'``): its next pass ends it through
the engine as ``gpuctl cancel`` does locally (the pods get the notice and stop, the open segment is
closed, the state is ``CANCELLED``) and the GPUJob with its status and cost stays until it is deleted.
Only who may patch the GPUJob can set it: the operator never writes ``spec``, and a job's pods have
no credentials for the API server (their monitors push only progress and GPU use to the intake)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from orchestrator.backends.kubernetes.crd import CANCEL_FIELD
from orchestrator.backends.kubernetes.manifests import check_kube_env, derived_name
from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec
from orchestrator.spec.model import NAME_PATTERN

OBJECT_NAME_MAX = 253
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A DNS-1123 subdomain: what the API server accepts as a GPUJob's name."""


def job_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of a GPUJob.

    ``name`` must be a Kubernetes object name (the pods' and Service's names are derived from it); it
    is the spec's name too unless ``spec.name`` is given (a name that is no DNS label gives a derived
    one). ``user`` is always the namespace, whatever ``spec.user`` says: cost goes to who the cluster
    says created the job."""
    if len(name) > OBJECT_NAME_MAX or not OBJECT_NAME.fullmatch(name):
        raise SpecError(
            f"GPUJob {namespace}/{name}",
            [
                f"metadata.name: '{name[:80]}' is not a Kubernetes object name. To fix: recreate the "
                "GPUJob with a name of lowercase letters, digits, '-' and '.', starting and ending with "
                f"a letter or digit, at most {OBJECT_NAME_MAX} characters"
            ],
        )
    default_name = name if re.fullmatch(NAME_PATTERN, name) else derived_name(name)
    data = {"name": default_name, **{k: v for k, v in spec.items() if k != CANCEL_FIELD}, "user": namespace}
    try:
        job = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise SpecError(f"GPUJob {namespace}/{name}", problems) from None
    check_kube_env(job, f"GPUJob {namespace}/{name}")  # from_env: only secretKeyRef reaches pods
    return job


def cancel_requested(spec: Mapping[str, Any]) -> bool:
    """Whether the GPUJob's ``spec`` asks the operator to cancel it (``spec.cancel: true``)."""
    return spec.get(CANCEL_FIELD) is True


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) turning ``old`` into ``new``: every key of ``new``, and ``null``
    for each key ``old`` has and ``new`` has not, in nested objects too (a merge patch merges an
    object into the one it replaces: a key left out of a nested object would stay)."""
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = value
    return patch
