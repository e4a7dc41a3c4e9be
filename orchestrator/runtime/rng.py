"""Capture and restore every random number generator a training step may use.

The captured state holds only tensors and plain Python values (no numpy arrays), so a checkpoint
that contains it loads with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def numpy_state_to_plain(state: Any) -> dict[str, Any]:
    """numpy's global RNG state (the legacy tuple or the dict form) with its key as a tensor."""
    if isinstance(state, dict) and isinstance(state.get("state", {}).get("key"), torch.Tensor):
        return state  # already plain
    if isinstance(state, tuple):
        name, key, pos, has_gauss, gauss = state
        state = {
            "bit_generator": name,
            "state": {"key": key, "pos": pos},
            "has_gauss": has_gauss,
            "gauss": gauss,
        }
    key = np.asarray(state["state"]["key"], dtype=np.uint32)
    return {
        "bit_generator": str(state["bit_generator"]),
        "state": {"key": torch.from_numpy(key.astype(np.int64)), "pos": int(state["state"]["pos"])},
        "has_gauss": int(state["has_gauss"]),
        "gauss": float(state["gauss"]),
    }


def _numpy_state_from_plain(plain: dict[str, Any]) -> dict[str, Any]:
    key = plain["state"]["key"].numpy().astype(np.uint32)
    return {**plain, "state": {"key": key, "pos": plain["state"]["pos"]}}


def capture_rng() -> dict[str, Any]:
    """The state of python's ``random``, numpy's global RNG, torch CPU and (if present) CUDA."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": numpy_state_to_plain(np.random.get_state(legacy=False)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back a state from :func:`capture_rng` (CUDA only when saved and present)."""
    random.setstate(state["python"])
    np.random.set_state(_numpy_state_from_plain(numpy_state_to_plain(state["numpy"])))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
