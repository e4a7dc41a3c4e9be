"""A GPUJob's status patch: what the API server makes of it is the new status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.backends.kubernetes.gpujob import status_patch


def merge(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies a merge patch."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            before = result.get(key)
            result[key] = merge(before if isinstance(before, Mapping) else {}, value)
        else:
            result[key] = value
    return result


def test_the_patched_status_is_the_new_one_nested_keys_removed_too() -> None:
    old = {
        "state": "RUNNING",
        "costUsd": 1.5,
        "progress": {"step": 9, "finished": True, "metrics": {"acc": 0.9}, "time": "t1"},
        "placement": {"zone": "us-central1-a", "market": "spot"},
        "segments": [{"start": "t0"}],
    }
    new = {
        "state": "RUNNING",
        "progress": {"step": 10, "time": "t2"},  # a resumed record cleared finished and metrics
        "placement": {"market": "on-demand"},
        "segments": [{"start": "t0"}, {"start": "t2"}],
    }
    assert merge(old, status_patch(old, new)) == new
    assert merge({}, status_patch({}, new)) == new
